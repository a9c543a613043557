"""The public docstrings of ``dinomamba_mm/`` follow OpenMMLab's style, as mmpretrain writes it.

Every ``Args:`` entry of a public class or function reads ``name (type): description.``
(``*args`` / ``**kwargs`` may go untyped, as in mmpretrain), names a parameter of the signature
(of ``__init__`` for a class), states ``Defaults to X.`` exactly when the parameter has a default,
and X is the signature's default when that is a literal. A ``Returns:`` / ``Yields:`` section
starts with ``type: description``. The source is read with :mod:`ast`; nothing is imported.
"""
import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / 'dinomamba_mm'

# a type may hold one level of parentheses, e.g. ``(tuple(int))``
TYPED_ENTRY = re.compile(r'^(\*{0,2}\w+) \(([^()]*(?:\([^()]*\)[^()]*)*)\): \S')
STARRED_ENTRY = re.compile(r'^(\*{1,2}\w+): \S')
# the last 'Defaults to X.' of an entry, X up to its end
DEFAULTS_TO = re.compile(r'Defaults to ((?:(?!Defaults to).)+?)\.?$')
TYPED_RESULT = re.compile(r'^[^\s:][^:]*:( \S|$)')
NO_DEFAULT = object()  # the parameter has no default
NOT_LITERAL = object()  # its default is an expression such as dict(type='LN')


def checked_files() -> List[Path]:
    """The package's Python files, sorted."""
    return sorted(PACKAGE.rglob('*.py'))


def public_definitions(tree: ast.Module) -> Iterator[Tuple[str, ast.AST, Dict[str, object]]]:
    """Public functions, classes and methods of public classes (``__init__`` included).

    Yields:
        tuple: The qualified name, the documented node and its parameters
        (:func:`parameters`; a class's are those of its ``__init__``, or of its annotated
        fields for a NamedTuple or dataclass without one).
    """
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if not isinstance(node, functions + (ast.ClassDef, )) or node.name.startswith('_'):
            continue
        if isinstance(node, functions):
            yield node.name, node, parameters(node)
            continue
        methods = {item.name: item for item in node.body if isinstance(item, functions)}
        init = methods.get('__init__')
        yield node.name, node, parameters(init) if init else field_parameters(node)
        for name, method in methods.items():
            if name == '__init__' or not name.startswith('_'):
                yield f'{node.name}.{name}', method, parameters(method)


def parameters(function: ast.AST) -> Dict[str, object]:
    """Parameter names (``*args`` / ``**kwargs`` without stars), each with its default: the
    literal's value, :data:`NOT_LITERAL` or :data:`NO_DEFAULT`."""
    args = function.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    found = {arg.arg: NO_DEFAULT if default is None else literal(default)
             for arg, default in pairs}
    for starred in (args.vararg, args.kwarg):
        if starred is not None:
            found[starred.arg] = NO_DEFAULT
    return found


def field_parameters(cls: ast.ClassDef) -> Dict[str, object]:
    """The annotated fields of a class body (a NamedTuple's or dataclass's parameters)."""
    return {item.target.id: NO_DEFAULT if item.value is None else literal(item.value)
            for item in cls.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}


def literal(node: ast.AST) -> object:
    """The value of a literal expression; :data:`NOT_LITERAL` for any other."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        return NOT_LITERAL


def section_lines(docstring: str, header: str) -> Optional[List[str]]:
    """The non-blank lines of a Google-style section, as indented; None when it is absent."""
    lines = docstring.splitlines()
    for index, line in enumerate(lines):
        if line.strip() == f'{header}:':
            header_indent = len(line) - len(line.lstrip())
            body = []
            for following in lines[index + 1:]:
                if not following.strip():
                    continue
                if len(following) - len(following.lstrip()) <= header_indent:
                    break
                body.append(following)
            return body
    return None


def split_entries(body: List[str]) -> List[str]:
    """One string per entry of a section: its first line and continuation lines joined."""
    entries: List[str] = []
    if not body:
        return entries
    entry_indent = len(body[0]) - len(body[0].lstrip())
    for line in body:
        if len(line) - len(line.lstrip()) <= entry_indent:
            entries.append(line.strip())
        else:
            entries[-1] += ' ' + line.strip()
    return entries


def same_literal(stated: object, actual: object) -> bool:
    """Equal, with True, False and None told apart from 1, 0 and the rest."""
    for special in (True, False, None):
        if (stated is special) != (actual is special):
            return False
    return stated == actual


def default_problem(entry: str, actual: object) -> Optional[str]:
    """How an entry's ``Defaults to`` disagrees with the signature's default; None if not."""
    found = DEFAULTS_TO.search(entry)
    if found is None:
        return None if actual is NO_DEFAULT else 'states no Defaults to, the signature has one'
    if actual is NO_DEFAULT:
        return 'states a default, the signature has none'
    if actual is NOT_LITERAL:  # a config such as dict(type='LN'), stated as written
        return None
    text = found.group(1).strip().strip('`')
    try:
        stated = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return f'states Defaults to {text!r}, not the literal {actual!r} of the signature'
    if not same_literal(stated, actual):
        return f'states Defaults to {stated!r}, the signature has {actual!r}'
    return None


def docstring_problems(source: str, where: str) -> List[str]:
    """Every departure from the style in one module's source, one line each."""
    problems = []
    for qualname, node, params in public_definitions(ast.parse(source)):
        docstring = ast.get_docstring(node)
        if not docstring:
            continue
        prefix = f'{where}: {qualname}:'
        for entry in split_entries(section_lines(docstring, 'Args') or []):
            match = TYPED_ENTRY.match(entry) or STARRED_ENTRY.match(entry)
            if match is None:
                problems.append(f"{prefix} not 'name (type): ...': {entry[:70]!r}")
                continue
            name = match.group(1).lstrip('*')
            if name not in params:
                problems.append(f'{prefix} {name!r} is not a parameter of the signature')
                continue
            problem = default_problem(entry, params[name])
            if problem:
                problems.append(f'{prefix} {name!r} {problem}')
        for header in ('Returns', 'Yields'):
            body = section_lines(docstring, header)
            if body and not TYPED_RESULT.match(body[0].strip()):
                problems.append(f"{prefix} {header} does not start with 'type: ...': "
                                f'{body[0].strip()[:70]!r}')
    return problems


@pytest.mark.parametrize('path', checked_files(),
                         ids=lambda path: str(path.relative_to(PACKAGE)))
def test_docstrings_follow_openmmlab_style(path):
    problems = docstring_problems(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    assert not problems, '\n'.join(problems)


GOOD_MODULE = '''
class Head:
    """A head.

    Args:
        in_channels (int): Input channels.
        norm_cfg (dict): Norm config. Defaults to ``dict(type='LN')``.
        scale (float): Scale. Defaults to 1.
        name (str, optional): Name. Defaults to None.
        **kwargs: Other arguments.
    """

    def __init__(self, in_channels, norm_cfg=dict(type='LN'), scale=1.0, name=None, **kwargs):
        pass

    def forward(self, x):
        """Forward.

        Args:
            x (torch.Tensor): Features of shape (B, C).

        Returns:
            torch.Tensor: Scores of shape (B, K).
        """


def _private(x):
    """Not checked.

    Args:
        x: anything.
    """
'''


def test_checker_accepts_openmmlab_style():
    assert docstring_problems(GOOD_MODULE, 'good.py') == []


@pytest.mark.parametrize('entry, signature, expected', [
    ('x: Features.', 'x', "not 'name (type): ...'"),
    ('a, b (int): Two at once.', 'a, b', "not 'name (type): ...'"),
    ('y (int): Not there.', 'x', "'y' is not a parameter"),
    ('x (int): Scale.', 'x=2', 'states no Defaults to'),
    ('x (int): Scale. Defaults to 2.', 'x', 'states a default, the signature has none'),
    ('x (int): Scale. Defaults to 3.', 'x=2', 'states Defaults to 3, the signature has 2'),
    ('x (bool): Flag. Defaults to 1.', 'x=True', 'states Defaults to 1, the signature has True'),
    ('x (str): Mode. Defaults to \'a\' (as DINO).', "x='a'", 'not the literal'),
])
def test_checker_reports_each_departure(entry, signature, expected):
    source = (f'def f({signature}):\n    """F.\n\n    Args:\n        {entry}\n    """\n')
    problems = docstring_problems(source, 'bad.py')
    assert len(problems) == 1 and expected in problems[0], problems


def test_checker_reports_untyped_returns_and_class_args():
    source = ('class C:\n    """C.\n\n    Args:\n        depth (int): Depth.\n    """\n'
              '\n    def __init__(self, width):\n        pass\n\n'
              '    def run(self):\n        """Run.\n\n        Returns:\n'
              '            (B, C) features.\n        """\n')
    problems = docstring_problems(source, 'bad.py')
    assert len(problems) == 2, problems
    assert "'depth' is not a parameter" in problems[0]
    assert "Returns does not start with 'type: ...'" in problems[1]

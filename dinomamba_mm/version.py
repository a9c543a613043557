__version__ = '0.1.0'


def parse_version_info(version_str: str) -> tuple:
    """'0.1.0' -> (0, 1, 0); a suffix like 'rc1' stays a string part."""
    parts = []
    for piece in version_str.split('.'):
        parts.append(int(piece) if piece.isdigit() else piece)
    return tuple(parts)


version_info = parse_version_info(__version__)

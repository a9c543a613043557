"""mmdet's COCO dataset whose annotation-file faults name the file and what is wrong in it."""
import json
from typing import List

from mmdet.datasets import CocoDataset as MMDetCocoDataset

from dinomamba_mm.registry import DATASETS


@DATASETS.register_module()
class CocoDataset(MMDetCocoDataset):
    """mmdet's ``CocoDataset``; a broken ``ann_file`` is a ``ValueError`` naming it.

    Refused: a file that is not JSON or not a JSON object (pycocotools raised a bare
    ``JSONDecodeError`` / ``AssertionError``), a missing key mmdet reads (a bare ``KeyError``),
    a file with no image (an empty dataset), and, outside ``test_mode``, a file with no
    annotation (training on nothing). Test files without annotations (test-dev) are allowed in
    ``test_mode``. All arguments are mmdet's.
    """

    def load_data_list(self) -> List[dict]:
        where = f'COCO annotation file {self.ann_file!r}'
        try:
            data_list = super().load_data_list()
        except json.JSONDecodeError as error:
            if not error.doc.strip():
                raise ValueError(f'{where} is empty: a COCO instances file is a JSON object '
                                 "with 'images', 'annotations' and 'categories'") from error
            raise ValueError(f'{where} is not valid JSON: {error}') from error
        except AssertionError as error:  # pycocotools: the top level is not an object
            raise ValueError(f'{where} is not a COCO file: {error}') from error
        except KeyError as error:
            raise ValueError(f'{where} has no {error} key; a COCO instances file holds '
                             "'images', 'annotations' and 'categories'") from error
        if not data_list:
            raise ValueError(f"{where} holds no image (its 'images' list is missing or empty)")
        if not self.test_mode and not any(info['instances'] for info in data_list):
            raise ValueError(f"{where} holds no annotation of the classes "
                             f"{list(self.metainfo['classes'])[:5]}... (its 'annotations' list "
                             'is missing or empty, or names other categories)')
        return data_list

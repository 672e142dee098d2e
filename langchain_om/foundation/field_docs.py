"""Field descriptions from attribute docstrings, read in one pass per module.

The configuration and event models document each field with the docstring under it; those
docstrings become ``FieldInfo.description`` (the configuration and events references in ``docs/``
are generated from them, and ``model_json_schema()`` shows them). pydantic's own
``use_attribute_docstrings`` finds each class's source by walking the call stack and asking
``inspect.getmodule`` about every frame, which scans ``sys.modules``: with LangChain loaded that
cost about 80 ms of ``import langchain_om``'s typical use across the two modules. Parsing the
module once does the same for all of its models. The models set ``defer_build=True``, so the
descriptions are in place before pydantic builds a model's schema (on its first use).
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

from pydantic import BaseModel


def describe_fields(module_name: str, base: type[BaseModel]) -> None:
    """Give every field of the module's subclasses of ``base`` that has no description its attribute
    docstring (from the class that declares it, or a base class in the same module). A module
    whose source cannot be read (frozen, bytecode only) keeps fields undescribed, as pydantic does."""
    module = sys.modules[module_name]
    try:
        tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return
    docs = {node.name: _attribute_docs(node) for node in tree.body if isinstance(node, ast.ClassDef)}
    for cls in list(vars(module).values()):
        if not (isinstance(cls, type) and issubclass(cls, base) and cls.__module__ == module_name):
            continue
        for name, info in cls.__pydantic_fields__.items():
            if info.description is not None:
                continue
            for klass in cls.__mro__:
                doc = docs.get(klass.__name__, {}).get(name) if klass.__module__ == module_name else None
                if doc:
                    info.description = doc
                    break


def _attribute_docs(node: ast.ClassDef) -> dict[str, str]:
    """``{field: docstring}`` for each ``name: type [= value]`` directly followed by a string literal."""
    out: dict[str, str] = {}
    for statement, following in zip(node.body, node.body[1:], strict=False):
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            out[statement.target.id] = inspect.cleandoc(following.value.value)
    return out

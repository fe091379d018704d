"""The type stubs of the extension module (`sagd/_core.pyi`) against the extension itself: every
function the extension exports is stubbed, with the same parameters in the same order, of the same
kind (by name only) and with a default exactly where the extension has one. A stub that falls
behind a signature fails here, not in a user's type checker."""

import ast
import inspect
from pathlib import Path

import sagd
from sagd import _core

STUB = Path(sagd.__file__).with_name("_core.pyi")


def stubbed_functions():
    tree = ast.parse(STUB.read_text())
    return {node.name: node.args for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_function_of_the_extension_is_stubbed_as_it_is():
    stubs = stubbed_functions()
    exported = {name for name in dir(_core)
                if not name.startswith("_") and callable(getattr(_core, name))}
    assert exported == set(stubs), (exported, set(stubs))
    for name, args in stubs.items():
        params = inspect.signature(getattr(_core, name)).parameters.values()
        # The extension takes every argument by name; so does each stub.
        assert not args.args and not args.posonlyargs and args.vararg is None, name
        stubbed = [(a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
        actual = [(p.name, p.default is not inspect.Parameter.empty) for p in params]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), name
        assert stubbed == actual, (name, stubbed, actual)

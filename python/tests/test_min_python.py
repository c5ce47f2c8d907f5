"""The oldest Python the package supports is the one python/pyproject.toml
states (requires-python), and configure.ac checks (BC_PYTHON_MIN): the two
agree, no file of the package uses syntax newer than it, and the extension
uses no C-API function newer than it outside a PY_VERSION_HEX guard.

Only the interpreter the tests run on is at hand, so the C side is checked
against a table of the C-API names that came after 3.8 (from "Added in
version" of the C-API reference); a name missing from it goes unseen."""

import ast
import os
import re

import pytest

SRC = os.environ.get("BC_SRCDIR") or os.path.join(os.path.dirname(__file__), "..", "..")
PY = os.path.join(SRC, "python")

# C-API names and the version that added them (public, non-limited API).
C_API_ADDED = {
    "PyObject_CallNoArgs": (3, 9), "PyObject_CallOneArg": (3, 9),
    "PyObject_Vectorcall": (3, 9), "PyObject_VectorcallMethod": (3, 9),
    "PyObject_CallMethodNoArgs": (3, 9), "PyObject_CallMethodOneArg": (3, 9),
    "PyModule_AddType": (3, 9), "PyType_FromModuleAndSpec": (3, 9),
    "PyType_GetModule": (3, 9), "PyType_GetModuleState": (3, 9),
    "PyThreadState_DeleteCurrent": (3, 9), "PyThreadState_GetFrame": (3, 9),
    "PyThreadState_GetInterpreter": (3, 9), "PyFrame_GetCode": (3, 9),
    "PyFrame_GetBack": (3, 9), "Py_SET_TYPE": (3, 9), "Py_SET_SIZE": (3, 9),
    "Py_SET_REFCNT": (3, 9), "PyInterpreterState_Get": (3, 9),
    "PyCMethod": (3, 9),
    "Py_NewRef": (3, 10), "Py_XNewRef": (3, 10), "Py_Is": (3, 10),
    "Py_IsNone": (3, 10), "Py_IsTrue": (3, 10), "Py_IsFalse": (3, 10),
    "Py_TPFLAGS_SEQUENCE": (3, 10), "Py_TPFLAGS_MAPPING": (3, 10),
    "Py_TPFLAGS_IMMUTABLETYPE": (3, 10), "Py_TPFLAGS_DISALLOW_INSTANTIATION": (3, 10),
    "PyModule_AddObjectRef": (3, 10), "PyIter_Send": (3, 10),
    "PyErr_SetInterruptEx": (3, 10),
    "PyType_GetModuleByDef": (3, 11), "PyType_GetName": (3, 11),
    "PyType_GetQualName": (3, 11), "PyErr_GetHandledException": (3, 11),
    "PyErr_SetHandledException": (3, 11), "PyFrame_GetLocals": (3, 11),
    "PyThreadState_EnterTracing": (3, 11), "Py_Version": (3, 11),
    "PyErr_GetRaisedException": (3, 12), "PyErr_SetRaisedException": (3, 12),
    "PyException_GetArgs": (3, 12), "PyType_GetDict": (3, 12),
    "PyObject_GetTypeData": (3, 12), "PyLong_AsInt": (3, 13),
    "PyDict_GetItemRef": (3, 13), "PyList_GetItemRef": (3, 13),
    "PyWeakref_GetRef": (3, 13), "PyImport_AddModuleRef": (3, 13),
    "PyObject_GetOptionalAttr": (3, 13), "PyMapping_GetOptionalItem": (3, 13),
    "Py_IsFinalizing": (3, 13), "PyMutex_Lock": (3, 13),
    "PyTime_Time": (3, 13), "PyTime_Monotonic": (3, 13),
}


def stated_minimum():
    with open(os.path.join(PY, "pyproject.toml")) as f:
        m = re.search(r'^requires-python\s*=\s*">=\s*(\d+)\.(\d+)"', f.read(), re.M)
    assert m, "pyproject.toml states no requires-python = \">=3.N\""
    return int(m.group(1)), int(m.group(2))


def package_files(ext):
    for top, _dirs, files in os.walk(os.path.join(PY, "bagcache")):
        for name in sorted(files):
            if name.endswith(ext):
                yield os.path.join(top, name)


def test_configure_checks_the_same_minimum():
    with open(os.path.join(SRC, "configure.ac")) as f:
        m = re.search(r"m4_define\(\[BC_PYTHON_MIN\], \[(\d+)\.(\d+)\]\)", f.read())
    assert m, "configure.ac defines no BC_PYTHON_MIN"
    assert (int(m.group(1)), int(m.group(2))) == stated_minimum()


@pytest.mark.parametrize("path", list(package_files(".py")) + [os.path.join(PY, "setup.py")],
                         ids=os.path.basename)
def test_python_syntax_is_that_of_the_minimum(path):
    with open(path) as f:
        ast.parse(f.read(), path, feature_version=stated_minimum())


def guarded_uses(text):
    """(name, guaranteed version, line) of every name of C_API_ADDED in C
    source text; the guaranteed version is that of the innermost enclosing
    `#if PY_VERSION_HEX >= 0x...` branch (None outside any)."""
    stack = []  # per open #if: the version its current branch guarantees
    names = re.compile(r"\b(" + "|".join(sorted(C_API_ADDED, key=len, reverse=True)) + r")\b")
    for lineno, line in enumerate(text.splitlines(), 1):
        d = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", line)
        if d:
            kind, rest = d.groups()
            if kind in ("if", "ifdef", "ifndef"):
                v = re.match(r"\s*PY_VERSION_HEX\s*>=\s*0x0([0-9A-Fa-f])([0-9A-Fa-f]{2})", rest)
                stack.append((int(v.group(1), 16), int(v.group(2), 16)) if kind == "if" and v
                             else None)
            elif kind in ("elif", "else") and stack:
                stack[-1] = None
            elif kind == "endif" and stack:
                stack.pop()
            continue
        for m in names.finditer(line):
            guard = max((v for v in stack if v), default=None)
            yield m.group(1), guard, lineno


def test_c_api_is_that_of_the_minimum():
    minimum = stated_minimum()
    too_new = []
    for top, _dirs, files in os.walk(os.path.join(PY, "src")):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(top, name)
            with open(path) as f:
                for api, guard, lineno in guarded_uses(f.read()):
                    if C_API_ADDED[api] > minimum and (guard is None or guard < C_API_ADDED[api]):
                        too_new.append(f"{os.path.relpath(path, PY)}:{lineno}: {api} "
                                       f"is Python {'.'.join(map(str, C_API_ADDED[api]))}")
    assert too_new == []


def test_the_minimum_is_what_the_extension_needs():
    """Not higher than needed either: the newest unguarded name in use is
    from the stated minimum (Py_NewRef and Py_TPFLAGS_SEQUENCE: 3.10)."""
    newest = (3, 0)
    for top, _dirs, files in os.walk(os.path.join(PY, "src")):
        for name in files:
            if name.endswith((".c", ".h")):
                with open(os.path.join(top, name)) as f:
                    for api, guard, _ in guarded_uses(f.read()):
                        if guard is None:
                            newest = max(newest, C_API_ADDED[api])
    assert newest == stated_minimum()


def test_the_guard_tracking_sees_guards():
    text = ("#if PY_VERSION_HEX >= 0x030D0000\nPy_IsFinalizing();\n#else\n"
            "_Py_IsFinalizing();\n#endif\nPy_NewRef(x);\n")
    assert list(guarded_uses(text)) == [("Py_IsFinalizing", (3, 13), 2),
                                        ("Py_NewRef", None, 6)]

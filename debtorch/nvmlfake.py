"""An NVML fake with the real binding's face, replayed from JSON.

``load(path)`` returns an object that answers the calls debtorch makes the way
``pynvml`` (the nvidia-ml-py package) does: the same function names and
parameter names, the same return shapes (strings as ``str``, structs as objects
with pynvml's attribute names, tuples where pynvml returns tuples, lists where
it returns lists), and the same error classes (``NVMLError`` subclasses such as
``NVMLError_NotSupported`` whose ``value`` is ``NVML_ERROR_NOT_SUPPORTED``).

The JSON (format ``debtorch-nvml-fake/1``)::

    {"format": "debtorch-nvml-fake/1", "source": "where it came from",
     "init_error": null,                       # or an NVML_ERROR_* value nvmlInit raises
     "system": {"nvmlSystemGetDriverVersion": "595.58.03", ...},
     "devices": [{"nvmlDeviceGetName": "NVIDIA GeForce RTX 3080",
                  "nvmlDeviceGetMemoryInfo": {"total": ..., "free": ..., "used": ...},
                  "nvmlDeviceGetEccMode": {"nvml_error": 3},
                  "nvmlDeviceGetTemperature": {"0": 27},          # keyed by the extra arguments
                  "nvmlDeviceGetNvLinkState": {"0": 1, "*": {"nvml_error": 2}}, ...}],
     "pairs": {"0,1": {"nvmlDeviceGetTopologyCommonAncestor": 20,
                       "nvmlDeviceGetP2PStatus": {"0": 0, "2": 0}}}}

A call that the JSON does not answer raises ``NVMLError_NoData`` whose text
says "not recorded in the NVML fake" (so a replay never pretends).

``dump(pynvml_module)`` records a live binding into that JSON
(``debtorch facts --record``); tests/smi_fake.py's ``from_smi_xml(xml_text)`` derives it from an
``nvidia-smi -q -x`` document, so real GPU states become fakes.
"""

from __future__ import annotations

import inspect
import itertools
import os
import string
from typing import Any, Callable, Optional, Union

from debtorch import inputs

FORMAT = "debtorch-nvml-fake/1"

# NVML_ERROR_* as in nvml.h / pynvml.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

# Other constants of pynvml's that code replayed on the fake (tests/hosts/build_gpu_fixtures.py) names.
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02

CONSTANTS = {k: v for k, v in dict(globals()).items() if k.startswith("NVML_")}

# The text pynvml gives each error (NVMLError._errcode_to_string); others fall back to this.
_ERROR_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}
NOT_RECORDED = "not recorded in the NVML fake"


class NVMLError(Exception):
    """pynvml's NVMLError: ``NVMLError(value)`` builds the subclass for that value; a subclass
    (``NVMLError_NotSupported()``) knows its own."""

    _valClassMapping: dict = {}
    _code: Optional[int] = None

    def __new__(cls, *args: Any) -> "NVMLError":
        if cls is NVMLError and args:
            cls = NVMLError._valClassMapping.get(args[0], cls)
        return Exception.__new__(cls)

    def __init__(self, *args: Any) -> None:
        self.value = self._code if self._code is not None else args[0]
        super().__init__(self.value)
        self._message = next((a for a in args if isinstance(a, str)), None)

    def __str__(self) -> str:
        if self._message:
            return self._message
        return _ERROR_TEXT.get(self.value, "NVML Error with code %d" % self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _make_error_classes() -> dict:
    classes = {}
    for name, value in CONSTANTS.items():
        if name.startswith("NVML_ERROR_"):
            # Same naming rule as pynvml: NVML_ERROR_ALREADY_INITIALIZED -> NVMLError_AlreadyInitialized.
            cls_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")
            classes[cls_name] = NVMLError._valClassMapping[value] = type(cls_name, (NVMLError,), {"_code": value})
    return classes


ERROR_CLASSES = _make_error_classes()
globals().update(ERROR_CLASSES)


def nvmlExceptionClass(nvmlErrorCode: int) -> type[NVMLError]:
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError("nvmlErrorCode %s is not valid" % nvmlErrorCode)
    return NVMLError._valClassMapping[nvmlErrorCode]


class FakeStruct:
    """Stands for a pynvml struct (attribute access by pynvml's field names)."""

    _struct_name = "struct"

    def __init__(self, fields: dict):
        for k, v in fields.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: {v}" for k, v in self.__dict__.items())
        return f"{self._struct_name}({inner})"

    __str__ = __repr__


_struct_classes: dict = {}


def _struct(name: str, fields: dict) -> FakeStruct:
    cls = _struct_classes.get(name)
    if cls is None:
        cls = type(name, (FakeStruct,), {"_struct_name": name})
        _struct_classes[name] = cls
    return cls(dict(fields))


# Struct field names, as in pynvml (tests check them against the installed binding).
STRUCT_FIELDS = {
    "nvmlPciInfo_t": ("busIdLegacy", "domain", "bus", "device", "pciDeviceId", "pciSubSystemId", "busId"),
    "c_nvmlMemory_t": ("total", "free", "used"),
    "c_nvmlUtilization_t": ("gpu", "memory"),
    "c_nvmlProcessInfo_t": ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"),
}

# name -> (kind, parameters as in pynvml, return shape)
# kind: system (no handle), device (first parameter a handle), pair (two handles).
# shape: value | tuple | list | struct:<name> | structs:<name>
SPEC: dict[str, tuple[str, tuple[str, ...], str]] = {
    "nvmlSystemGetDriverVersion": ("system", (), "value"),
    "nvmlSystemGetCudaDriverVersion": ("system", (), "value"),
    "nvmlSystemGetCudaDriverVersion_v2": ("system", (), "value"),
    "nvmlSystemGetNVMLVersion": ("system", (), "value"),
    "nvmlDeviceGetCount": ("system", (), "value"),
    "nvmlDeviceGetName": ("device", ("handle",), "value"),
    "nvmlDeviceGetUUID": ("device", ("handle",), "value"),
    "nvmlDeviceGetSerial": ("device", ("handle",), "value"),
    "nvmlDeviceGetMinorNumber": ("device", ("handle",), "value"),
    "nvmlDeviceGetIndex": ("device", ("handle",), "value"),
    "nvmlDeviceGetPciInfo": ("device", ("handle",), "struct:nvmlPciInfo_t"),
    "nvmlDeviceGetPciInfo_v3": ("device", ("handle",), "struct:nvmlPciInfo_t"),
    "nvmlDeviceGetCudaComputeCapability": ("device", ("handle",), "tuple"),
    "nvmlDeviceGetMemoryInfo": ("device", ("handle", "version"), "struct:c_nvmlMemory_t"),
    "nvmlDeviceGetCurrPcieLinkGeneration": ("device", ("handle",), "value"),
    "nvmlDeviceGetMaxPcieLinkGeneration": ("device", ("handle",), "value"),
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": ("device", ("handle",), "value"),
    "nvmlDeviceGetCurrPcieLinkWidth": ("device", ("handle",), "value"),
    "nvmlDeviceGetMaxPcieLinkWidth": ("device", ("handle",), "value"),
    "nvmlDeviceGetPersistenceMode": ("device", ("handle",), "value"),
    "nvmlDeviceGetEccMode": ("device", ("handle",), "list"),
    "nvmlDeviceGetTotalEccErrors": ("device", ("handle", "errorType", "counterType"), "value"),
    "nvmlDeviceGetRetiredPages": ("device", ("device", "sourceFilter"), "list"),
    "nvmlDeviceGetRetiredPagesPendingStatus": ("device", ("device",), "value"),
    "nvmlDeviceGetRemappedRows": ("device", ("device",), "tuple"),
    "nvmlDeviceGetCurrentClocksThrottleReasons": ("device", ("handle",), "value"),
    "nvmlDeviceGetCurrentClocksEventReasons": ("device", ("handle",), "value"),
    "nvmlDeviceGetTemperature": ("device", ("handle", "sensor"), "value"),
    "nvmlDeviceGetPowerUsage": ("device", ("handle",), "value"),
    "nvmlDeviceGetEnforcedPowerLimit": ("device", ("handle",), "value"),
    "nvmlDeviceGetPowerManagementLimit": ("device", ("handle",), "value"),
    "nvmlDeviceGetMigMode": ("device", ("device",), "list"),
    "nvmlDeviceGetComputeMode": ("device", ("handle",), "value"),
    "nvmlDeviceGetComputeRunningProcesses": ("device", ("handle",), "structs:c_nvmlProcessInfo_t"),
    "nvmlDeviceGetUtilizationRates": ("device", ("handle",), "struct:c_nvmlUtilization_t"),
    "nvmlDeviceGetNvLinkState": ("device", ("device", "link"), "value"),
    "nvmlDeviceGetNvLinkRemotePciInfo": ("device", ("device", "link"), "struct:nvmlPciInfo_t"),
    "nvmlDeviceGetNvLinkRemoteDeviceType": ("device", ("handle", "link"), "value"),
    "nvmlDeviceGetTopologyCommonAncestor": ("pair", ("device1", "device2"), "value"),
    "nvmlDeviceGetP2PStatus": ("pair", ("device1", "device2", "p2pIndex"), "value"),
}
# Parameters that take a default in pynvml and select no answer here (the others after the handles do).
_IGNORED = {"nvmlDeviceGetMemoryInfo": ("version",)}


class FakeHandle:
    """What nvmlDeviceGetHandleBy* returns."""

    def __init__(self, index: int):
        self.index = index

    def __repr__(self) -> str:
        return f"<nvmlDevice {self.index} (fake)>"


def _signature(name: str, params: tuple) -> inspect.Signature:
    """pynvml's parameters; those it defaults (and the fake ignores) default to None."""
    return inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                default=None if p in _IGNORED.get(name, ()) else inspect.Parameter.empty)
                              for p in params])


class FakeNVML:
    """The object ``load`` returns: use it where ``pynvml`` would be used."""

    NVMLError = NVMLError

    def __init__(self, data: dict):
        if not isinstance(data, dict):
            raise ValueError("an NVML fake is a JSON object")
        fmt = data.get("format")
        if fmt not in (None, FORMAT):
            raise ValueError(f"unknown NVML fake format {fmt!r}")
        self.data = data
        self._initialised = 0
        for k, v in CONSTANTS.items():
            setattr(self, k, v)
        for k, v in ERROR_CLASSES.items():
            setattr(self, k, v)
        self.nvmlExceptionClass = nvmlExceptionClass
        for name, (kind, params, shape) in SPEC.items():
            setattr(self, name, self._make(name, kind, params, shape))

    # -- library life ------------------------------------------------------
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        err = self.data.get("init_error")
        if err:
            raise NVMLError(int(err))
        self._initialised += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self._initialised -= 1

    def nvmlErrorString(self, result: int) -> str:
        return _ERROR_TEXT.get(result, "Unknown Error")

    def _check(self) -> None:
        if self._initialised <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    # -- handles -----------------------------------------------------------
    def _devices(self) -> list:
        return list(self.data.get("devices") or [])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._check()
        if not isinstance(index, int) or not 0 <= index < len(self._devices()):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeHandle:
        def has_uuid(d: dict) -> bool:
            return d.get("nvmlDeviceGetUUID") == uuid

        return self._handle_where(has_uuid)

    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str) -> FakeHandle:
        def on_bus(d: dict) -> bool:
            pci = d.get("nvmlDeviceGetPciInfo")
            return isinstance(pci, dict) and str(pci.get("busId", "")).lower() == str(pciBusId).lower()

        return self._handle_where(on_bus)

    def _handle_where(self, match: Callable[[dict], bool]) -> FakeHandle:
        self._check()
        index = next((i for i, d in enumerate(self._devices()) if match(d)), None)
        if index is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return FakeHandle(index)

    # -- generated calls ---------------------------------------------------
    def _make(self, name: str, kind: str, params: tuple[str, ...], shape: str) -> Callable[..., Any]:
        sig = _signature(name, params)

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)     # TypeError for a missing argument, as pynvml's own
            bound.apply_defaults()
            values = [bound.arguments[p] for p in params]
            self._check()
            if kind == "system":
                table, extra = self.data.get("system") or {}, []
            elif kind == "device":
                table, extra = self._device_table(values[0]), values[1:]
            else:
                table, extra = self._pair_table(values[0], values[1]), values[2:]
            extra = [v for p, v in zip(params[len(params) - len(extra):], extra) if p not in _IGNORED.get(name, ())]
            if name not in table:
                raise NVMLError(NVML_ERROR_NO_DATA, f"{NOT_RECORDED}: {name}")
            value = table[name]
            if extra:
                if not isinstance(value, dict):
                    raise NVMLError(NVML_ERROR_NO_DATA, f"{NOT_RECORDED}: {name} by argument")
                key = ",".join(str(int(a)) if isinstance(a, (int, bool)) else str(a) for a in extra)
                if key in value:
                    value = value[key]
                elif "*" in value:
                    value = value["*"]
                else:
                    raise NVMLError(NVML_ERROR_NO_DATA, f"{NOT_RECORDED}: {name}({key})")
            if isinstance(value, dict) and "nvml_error" in value:
                raise NVMLError(int(value["nvml_error"]))
            return _shape(value, shape)

        call.__name__ = name
        call.__qualname__ = f"FakeNVML.{name}"
        call.__signature__ = sig  # type: ignore[attr-defined]  # inspect.signature reads it
        return call

    def _device_table(self, handle: object) -> dict:
        if not isinstance(handle, FakeHandle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        devs = self._devices()
        if not 0 <= handle.index < len(devs):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return devs[handle.index]

    def _pair_table(self, h1: object, h2: object) -> dict:
        if not isinstance(h1, FakeHandle) or not isinstance(h2, FakeHandle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        pairs = self.data.get("pairs") or {}
        a, b = sorted((h1.index, h2.index))
        return pairs.get(f"{a},{b}") or {}


def _shape(value: Any, shape: str) -> Any:
    if shape == "tuple":
        return tuple(value)
    if shape == "list":
        return list(value)
    if shape.startswith("struct:"):
        return _struct(shape.split(":", 1)[1], value)
    if shape.startswith("structs:"):
        name = shape.split(":", 1)[1]
        return [_struct(name, v) for v in value]
    return value


def load(path: Union[str, os.PathLike[str]]) -> FakeNVML:
    """The fake recorded in ``path`` (a JSON file, read through :mod:`debtorch.inputs`)."""
    return FakeNVML(inputs.parse_json(inputs.read_text(str(path), what="an NVML recording"), str(path)))


def loads(data: dict) -> FakeNVML:
    return FakeNVML(data)


# ---------------------------------------------------------------------------
# Recording a live binding


def _to_json(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if hasattr(value, "_fields_"):  # a ctypes struct
        return {f[0]: _to_json(getattr(value, f[0])) for f in value._fields_}
    if hasattr(value, "__dict__"):
        return {k: _to_json(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


def _record(fn: Callable, *args: Any) -> Optional[Any]:
    try:
        return _to_json(fn(*args))
    except Exception as exc:  # noqa: BLE001
        value = getattr(exc, "value", None)
        if isinstance(value, int):
            return {"nvml_error": value}
        return None  # not in this binding: leave it unrecorded


# Argument values to record for calls that take more than a handle.
_ARGS: dict[str, list[tuple[int, ...]]] = {
    "nvmlDeviceGetTotalEccErrors": [(1, 0), (1, 1), (0, 0), (0, 1)],
    "nvmlDeviceGetRetiredPages": [(0,), (1,)],
    "nvmlDeviceGetTemperature": [(0,)],
    "nvmlDeviceGetP2PStatus": [(0,), (1,), (2,)],
}
_NVLINK_CALLS = ("nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemoteDeviceType")


def _record_calls(nv: Any, kind: str, handles: tuple, into: dict) -> dict:
    """Record into ``into`` every call of ``kind`` the binding has, on ``handles``: one answer, or
    a table of answers by the arguments of :data:`_ARGS`."""
    for name, (k, params, _shape) in SPEC.items():
        if k != kind or not hasattr(nv, name) or name in _NVLINK_CALLS:
            continue
        fn = getattr(nv, name)
        if len(params) == len(handles) or name in _IGNORED:
            val = _record(fn, *handles)
        else:
            answers = {",".join(map(str, args)): _record(fn, *handles, *args) for args in _ARGS.get(name, [])}
            val = {key: v for key, v in answers.items() if v is not None} or None
        if val is not None:
            into[name] = val
    return into


def dump(nv: Any, source: str = "recorded from a live NVML") -> dict:
    """Record an initialised pynvml-like binding ``nv`` into the fake's JSON."""
    data: dict = {"format": FORMAT, "source": source, "init_error": None,
                  "system": _record_calls(nv, "system", (), {}), "devices": [], "pairs": {}}
    count = data["system"].get("nvmlDeviceGetCount")
    handles = []
    for i in range(count if isinstance(count, int) else 0):
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except Exception:  # noqa: BLE001
            h = None
        handles.append(h)
        data["devices"].append(_dump_nvlinks(nv, h, _record_calls(nv, "device", (h,), {})) if h is not None else {})
    for i, j in itertools.combinations(range(len(handles)), 2):
        if handles[i] is not None and handles[j] is not None:
            data["pairs"][f"{i},{j}"] = _record_calls(nv, "pair", (handles[i], handles[j]), {})
    return data


def _dump_nvlinks(nv: Any, h: Any, dev: dict) -> dict:
    if not hasattr(nv, _NVLINK_CALLS[0]):
        return dev
    tables: dict = {name: {} for name in _NVLINK_CALLS}
    states = tables[_NVLINK_CALLS[0]]
    for link in range(18):
        st = _record(nv.nvmlDeviceGetNvLinkState, h, link)
        if st is None:
            continue
        states[str(link)] = st
        if isinstance(st, dict):
            if link == 0:
                break
            continue
        for name in _NVLINK_CALLS[1:] if st == 1 else ():
            val = _record(getattr(nv, name), h, link) if hasattr(nv, name) else None
            if val is not None:
                tables[name][str(link)] = val
    if states:
        # Links beyond those recorded answer like an absent link.
        states.setdefault("*", {"nvml_error": NVML_ERROR_INVALID_ARGUMENT})
    dev.update((name, table) for name, table in tables.items() if table)
    return dev

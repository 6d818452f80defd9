"""Helpers shared by the NVIDIA readers (nsys SQLite/CSV, nvprof SQLite/CSV).

* CUPTI callback-id tables: nvprof databases store runtime and driver API calls as a ``cbid``
  (no name). The tables below are transcribed from CUPTI's generated headers
  ``cupti_runtime_cbid.h`` and ``cupti_driver_cbid.h`` (the enums are append-only, so an id
  keeps its meaning across CUDA releases). They cover the common memory, launch, stream,
  event, device, context and graph calls, every id in the corpus file
  ``ece408__timeline.nvprof``, and leave out the graphics-interop (GL/D3D/VDPAU/EGL)
  families. An id not listed becomes ``cbid_<n>`` (see :func:`runtime_cbid_name`).
* A C++ demangler front end (:func:`demangle`): the ``cxxfilt`` module when installed, else
  one ``c++filt`` subprocess for all names, else the names are kept mangled (one warning).
* Read-only SQLite access with our error messages (:func:`connect_ro`, :func:`sqlite_tables`).
* Classification shared by all readers (:func:`is_sync_api`, :func:`is_nccl_kernel`).
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis._io import check_file
from analysis.errors import ReadError, RecoveryWarning

SQLITE_MAGIC = b"SQLite format 3\x00"

# --- CUPTI runtime API callback ids (cupti_runtime_cbid.h) -----------------------------------
RUNTIME_CBID: dict[int, str] = {
    1: "cudaDriverGetVersion_v3020",
    2: "cudaRuntimeGetVersion_v3020",
    3: "cudaGetDeviceCount_v3020",
    4: "cudaGetDeviceProperties_v3020",
    5: "cudaChooseDevice_v3020",
    6: "cudaGetChannelDesc_v3020",
    7: "cudaCreateChannelDesc_v3020",
    8: "cudaConfigureCall_v3020",
    9: "cudaSetupArgument_v3020",
    10: "cudaGetLastError_v3020",
    11: "cudaPeekAtLastError_v3020",
    12: "cudaGetErrorString_v3020",
    13: "cudaLaunch_v3020",
    14: "cudaFuncSetCacheConfig_v3020",
    15: "cudaFuncGetAttributes_v3020",
    16: "cudaSetDevice_v3020",
    17: "cudaGetDevice_v3020",
    18: "cudaSetValidDevices_v3020",
    19: "cudaSetDeviceFlags_v3020",
    20: "cudaMalloc_v3020",
    21: "cudaMallocPitch_v3020",
    22: "cudaFree_v3020",
    23: "cudaMallocArray_v3020",
    24: "cudaFreeArray_v3020",
    25: "cudaMallocHost_v3020",
    26: "cudaFreeHost_v3020",
    27: "cudaHostAlloc_v3020",
    28: "cudaHostGetDevicePointer_v3020",
    29: "cudaHostGetFlags_v3020",
    30: "cudaMemGetInfo_v3020",
    31: "cudaMemcpy_v3020",
    32: "cudaMemcpy2D_v3020",
    33: "cudaMemcpyToArray_v3020",
    34: "cudaMemcpy2DToArray_v3020",
    35: "cudaMemcpyFromArray_v3020",
    36: "cudaMemcpy2DFromArray_v3020",
    37: "cudaMemcpyArrayToArray_v3020",
    38: "cudaMemcpy2DArrayToArray_v3020",
    39: "cudaMemcpyToSymbol_v3020",
    40: "cudaMemcpyFromSymbol_v3020",
    41: "cudaMemcpyAsync_v3020",
    42: "cudaMemcpyToArrayAsync_v3020",
    43: "cudaMemcpyFromArrayAsync_v3020",
    44: "cudaMemcpy2DAsync_v3020",
    45: "cudaMemcpy2DToArrayAsync_v3020",
    46: "cudaMemcpy2DFromArrayAsync_v3020",
    47: "cudaMemcpyToSymbolAsync_v3020",
    48: "cudaMemcpyFromSymbolAsync_v3020",
    49: "cudaMemset_v3020",
    50: "cudaMemset2D_v3020",
    51: "cudaMemsetAsync_v3020",
    52: "cudaMemset2DAsync_v3020",
    53: "cudaGetSymbolAddress_v3020",
    54: "cudaGetSymbolSize_v3020",
    55: "cudaBindTexture_v3020",
    56: "cudaBindTexture2D_v3020",
    57: "cudaBindTextureToArray_v3020",
    58: "cudaUnbindTexture_v3020",
    123: "cudaThreadExit_v3020",
    126: "cudaThreadSynchronize_v3020",
    127: "cudaThreadGetLimit_v3020",
    128: "cudaThreadSetLimit_v3020",
    129: "cudaStreamCreate_v3020",
    130: "cudaStreamDestroy_v3020",
    131: "cudaStreamSynchronize_v3020",
    132: "cudaStreamQuery_v3020",
    133: "cudaEventCreate_v3020",
    134: "cudaEventCreateWithFlags_v3020",
    135: "cudaEventRecord_v3020",
    136: "cudaEventDestroy_v3020",
    137: "cudaEventSynchronize_v3020",
    138: "cudaEventQuery_v3020",
    139: "cudaEventElapsedTime_v3020",
    140: "cudaMalloc3D_v3020",
    141: "cudaMalloc3DArray_v3020",
    142: "cudaMemset3D_v3020",
    143: "cudaMemset3DAsync_v3020",
    144: "cudaMemcpy3D_v3020",
    145: "cudaMemcpy3DAsync_v3020",
    146: "cudaThreadSetCacheConfig_v3020",
    147: "cudaStreamWaitEvent_v3020",
    150: "cudaThreadGetCacheConfig_v3020",
    151: "cudaPointerGetAttributes_v4000",
    152: "cudaHostRegister_v4000",
    153: "cudaHostUnregister_v4000",
    154: "cudaDeviceCanAccessPeer_v4000",
    155: "cudaDeviceEnablePeerAccess_v4000",
    156: "cudaDeviceDisablePeerAccess_v4000",
    157: "cudaPeerRegister_v4000",
    158: "cudaPeerUnregister_v4000",
    159: "cudaPeerGetDevicePointer_v4000",
    160: "cudaMemcpyPeer_v4000",
    161: "cudaMemcpyPeerAsync_v4000",
    162: "cudaMemcpy3DPeer_v4000",
    163: "cudaMemcpy3DPeerAsync_v4000",
    164: "cudaDeviceReset_v3020",
    165: "cudaDeviceSynchronize_v3020",
    166: "cudaDeviceGetLimit_v3020",
    167: "cudaDeviceSetLimit_v3020",
    168: "cudaDeviceGetCacheConfig_v3020",
    169: "cudaDeviceSetCacheConfig_v3020",
    170: "cudaProfilerInitialize_v4000",
    171: "cudaProfilerStart_v4000",
    172: "cudaProfilerStop_v4000",
    173: "cudaDeviceGetByPCIBusId_v4010",
    174: "cudaDeviceGetPCIBusId_v4010",
    176: "cudaIpcGetEventHandle_v4010",
    177: "cudaIpcOpenEventHandle_v4010",
    178: "cudaIpcGetMemHandle_v4010",
    179: "cudaIpcOpenMemHandle_v4010",
    180: "cudaIpcCloseMemHandle_v4010",
    181: "cudaArrayGetInfo_v4010",
    182: "cudaFuncSetSharedMemConfig_v4020",
    183: "cudaDeviceGetSharedMemConfig_v4020",
    184: "cudaDeviceSetSharedMemConfig_v4020",
    185: "cudaCreateTextureObject_v5000",
    186: "cudaDestroyTextureObject_v5000",
    197: "cudaStreamAddCallback_v5000",
    198: "cudaStreamCreateWithFlags_v5000",
    200: "cudaDeviceGetAttribute_v5000",
    201: "cudaStreamDestroy_v5050",
    202: "cudaStreamCreateWithPriority_v5050",
    203: "cudaStreamGetPriority_v5050",
    204: "cudaStreamGetFlags_v5050",
    205: "cudaDeviceGetStreamPriorityRange_v5050",
    206: "cudaMallocManaged_v6000",
    207: "cudaOccupancyMaxActiveBlocksPerMultiprocessor_v6000",
    208: "cudaStreamAttachMemAsync_v6000",
    209: "cudaGetErrorName_v6050",
    210: "cudaOccupancyMaxActiveBlocksPerMultiprocessor_v6050",
    211: "cudaLaunchKernel_v7000",
    212: "cudaGetDeviceFlags_v7000",
    213: "cudaLaunch_ptsz_v7000",
    214: "cudaLaunchKernel_ptsz_v7000",
    215: "cudaMemcpy_ptds_v7000",
    216: "cudaMemcpy2D_ptds_v7000",
    223: "cudaMemcpyToSymbol_ptds_v7000",
    224: "cudaMemcpyFromSymbol_ptds_v7000",
    225: "cudaMemcpyAsync_ptsz_v7000",
    228: "cudaMemcpy2DAsync_ptsz_v7000",
    231: "cudaMemcpyToSymbolAsync_ptsz_v7000",
    232: "cudaMemcpyFromSymbolAsync_ptsz_v7000",
    233: "cudaMemset_ptds_v7000",
    234: "cudaMemset2D_ptds_v7000",
    235: "cudaMemsetAsync_ptsz_v7000",
    236: "cudaMemset2DAsync_ptsz_v7000",
    237: "cudaStreamGetPriority_ptsz_v7000",
    238: "cudaStreamGetFlags_ptsz_v7000",
    239: "cudaStreamSynchronize_ptsz_v7000",
    240: "cudaStreamQuery_ptsz_v7000",
    241: "cudaStreamAttachMemAsync_ptsz_v7000",
    242: "cudaEventRecord_ptsz_v7000",
    243: "cudaMemset3D_ptds_v7000",
    244: "cudaMemset3DAsync_ptsz_v7000",
    245: "cudaMemcpy3D_ptds_v7000",
    246: "cudaMemcpy3DAsync_ptsz_v7000",
    247: "cudaStreamWaitEvent_ptsz_v7000",
    248: "cudaStreamAddCallback_ptsz_v7000",
    249: "cudaMemcpy3DPeer_ptds_v7000",
    250: "cudaMemcpy3DPeerAsync_ptsz_v7000",
    251: "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000",
    252: "cudaMemPrefetchAsync_v8000",
    253: "cudaMemPrefetchAsync_ptsz_v8000",
    254: "cudaMemAdvise_v8000",
    255: "cudaDeviceGetP2PAttribute_v8000",
    266: "cudaMemRangeGetAttribute_v8000",
    267: "cudaMemRangeGetAttributes_v8000",
    269: "cudaLaunchCooperativeKernel_v9000",
    270: "cudaLaunchCooperativeKernel_ptsz_v9000",
    272: "cudaLaunchCooperativeKernelMultiDevice_v9000",
    273: "cudaFuncSetAttribute_v9000",
    284: "cudaLaunchHostFunc_v10000",
    285: "cudaLaunchHostFunc_ptsz_v10000",
    286: "cudaGraphCreate_v10000",
    310: "cudaGraphInstantiate_v10000",
    311: "cudaGraphLaunch_v10000",
    312: "cudaGraphLaunch_ptsz_v10000",
    313: "cudaGraphExecDestroy_v10000",
    314: "cudaGraphDestroy_v10000",
    315: "cudaStreamBeginCapture_v10000",
    316: "cudaStreamBeginCapture_ptsz_v10000",
    317: "cudaStreamIsCapturing_v10000",
    318: "cudaStreamIsCapturing_ptsz_v10000",
    319: "cudaStreamEndCapture_v10000",
    320: "cudaStreamEndCapture_ptsz_v10000",
}

# --- CUPTI driver API callback ids (cupti_driver_cbid.h) -------------------------------------
DRIVER_CBID: dict[int, str] = {
    1: "cuInit",
    2: "cuDriverGetVersion",
    3: "cuDeviceGet",
    4: "cuDeviceGetCount",
    5: "cuDeviceGetName",
    6: "cuDeviceComputeCapability",
    7: "cuDeviceTotalMem",
    8: "cuDeviceGetProperties",
    9: "cuDeviceGetAttribute",
    10: "cuCtxCreate",
    11: "cuCtxDestroy",
    14: "cuCtxPushCurrent",
    15: "cuCtxPopCurrent",
    16: "cuCtxGetDevice",
    17: "cuCtxSynchronize",
    18: "cuModuleLoad",
    19: "cuModuleLoadData",
    20: "cuModuleLoadDataEx",
    21: "cuModuleLoadFatBinary",
    22: "cuModuleUnload",
    23: "cuModuleGetFunction",
    24: "cuModuleGetGlobal",
    27: "cuMemGetInfo",
    29: "cuMemAlloc",
    31: "cuMemAllocPitch",
    33: "cuMemFree",
    35: "cuMemGetAddressRange",
    37: "cuMemAllocHost",
    38: "cuMemFreeHost",
    39: "cuMemHostAlloc",
    40: "cuMemHostGetDevicePointer",
    42: "cuMemHostGetFlags",
    43: "cuMemcpyHtoD",
    45: "cuMemcpyDtoH",
    47: "cuMemcpyDtoD",
    60: "cuMemcpyHtoDAsync",
    62: "cuMemcpyDtoHAsync",
    64: "cuMemcpyDtoDAsync",
    71: "cuMemsetD8",
    73: "cuMemsetD16",
    75: "cuMemsetD32",
    85: "cuFuncGetAttribute",
    86: "cuFuncSetCacheConfig",
    115: "cuLaunch",
    116: "cuLaunchGrid",
    117: "cuLaunchGridAsync",
    118: "cuEventCreate",
    119: "cuEventRecord",
    120: "cuEventQuery",
    121: "cuEventSynchronize",
    122: "cuEventDestroy",
    123: "cuEventElapsedTime",
    124: "cuStreamCreate",
    125: "cuStreamQuery",
    126: "cuStreamSynchronize",
    127: "cuStreamDestroy",
    135: "cuGetExportTable",
    136: "cuCtxSetLimit",
    137: "cuCtxGetLimit",
    216: "cuMemsetD8Async",
    218: "cuMemsetD16Async",
    220: "cuMemsetD32Async",
    235: "cuCtxCreate_v2",
    241: "cuModuleGetGlobal_v2",
    242: "cuMemGetInfo_v2",
    243: "cuMemAlloc_v2",
    244: "cuMemAllocPitch_v2",
    245: "cuMemFree_v2",
    246: "cuMemGetAddressRange_v2",
    247: "cuMemHostGetDevicePointer_v2",
    248: "cuMemcpy_v2",
    249: "cuMemsetD8_v2",
    250: "cuMemsetD16_v2",
    251: "cuMemsetD32_v2",
    259: "cuDeviceTotalMem_v2",
    271: "cuMemHostAlloc_v2",
    276: "cuMemcpyHtoD_v2",
    277: "cuMemcpyHtoDAsync_v2",
    278: "cuMemcpyDtoH_v2",
    279: "cuMemcpyDtoHAsync_v2",
    280: "cuMemcpyDtoD_v2",
    281: "cuMemcpyDtoDAsync_v2",
    287: "cuMemcpy2D_v2",
    289: "cuMemcpy2DAsync_v2",
    290: "cuMemcpy3D_v2",
    291: "cuMemcpy3DAsync_v2",
    294: "cuMemAllocHost_v2",
    295: "cuStreamWaitEvent",
    296: "cuCtxGetApiVersion",
    299: "cuCtxGetCacheConfig",
    300: "cuCtxSetCacheConfig",
    301: "cuMemHostRegister",
    302: "cuMemHostUnregister",
    303: "cuCtxSetCurrent",
    304: "cuCtxGetCurrent",
    305: "cuMemcpy",
    306: "cuMemcpyAsync",
    307: "cuLaunchKernel",
    308: "cuProfilerStart",
    309: "cuProfilerStop",
    310: "cuPointerGetAttribute",
    311: "cuProfilerInitialize",
    312: "cuDeviceCanAccessPeer",
    313: "cuCtxEnablePeerAccess",
    314: "cuCtxDisablePeerAccess",
    318: "cuMemcpyPeer",
    319: "cuMemcpyPeerAsync",
    320: "cuMemcpy3DPeer",
    321: "cuMemcpy3DPeerAsync",
    322: "cuCtxDestroy_v2",
    323: "cuCtxPushCurrent_v2",
    324: "cuCtxPopCurrent_v2",
    325: "cuEventDestroy_v2",
    326: "cuStreamDestroy_v2",
    328: "cuIpcGetMemHandle",
    329: "cuIpcOpenMemHandle",
    330: "cuIpcCloseMemHandle",
    331: "cuDeviceGetByPCIBusId",
    332: "cuDeviceGetPCIBusId",
    334: "cuIpcGetEventHandle",
    335: "cuIpcOpenEventHandle",
    346: "cuStreamAddCallback",
    367: "cuStreamCreateWithPriority",
    368: "cuStreamGetPriority",
    369: "cuStreamGetFlags",
    370: "cuCtxGetStreamPriorityRange",
    371: "cuMemAllocManaged",
    372: "cuGetErrorString",
    373: "cuGetErrorName",
    374: "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    379: "cuMemHostRegister_v2",
    384: "cuOccupancyMaxPotentialBlockSize",
    386: "cuDevicePrimaryCtxRetain",
    387: "cuDevicePrimaryCtxRelease",
    388: "cuDevicePrimaryCtxSetFlags",
    389: "cuDevicePrimaryCtxReset",
    391: "cuCtxGetFlags",
    392: "cuDevicePrimaryCtxGetState",
    418: "cuMemcpyAsync_ptsz",
    421: "cuMemcpyHtoDAsync_v2_ptsz",
    422: "cuMemcpyDtoHAsync_v2_ptsz",
    423: "cuMemcpyDtoDAsync_v2_ptsz",
    436: "cuStreamWaitEvent_ptsz",
    439: "cuStreamQuery_ptsz",
    440: "cuStreamSynchronize_ptsz",
    441: "cuEventRecord_ptsz",
    442: "cuLaunchKernel_ptsz",
    450: "cuPointerGetAttributes",
    454: "cuDeviceGetP2PAttribute",
    457: "cuMemAdvise",
    467: "cuMemPrefetchAsync",
    468: "cuMemPrefetchAsync_ptsz",
    477: "cuLaunchCooperativeKernel",
    478: "cuLaunchCooperativeKernel_ptsz",
    481: "cuFuncSetAttribute",
    482: "cuDeviceGetUuid",
}


def runtime_cbid_name(cbid: int) -> str:
    """Name of a CUDA runtime API callback id, or ``cbid_<n>`` when not in the table."""
    return RUNTIME_CBID.get(int(cbid), f"cbid_{int(cbid)}")


def driver_cbid_name(cbid: int) -> str:
    """Name of a CUDA driver API callback id, or ``cbid_<n>`` when not in the table."""
    return DRIVER_CBID.get(int(cbid), f"cbid_{int(cbid)}")


# --- classification ---------------------------------------------------------------------------
_API_SUFFIX = re.compile(r"(_v\d+)?(_ptsz|_ptds)?(_v\d+)?$")

#: Host calls that block until the device (or a stream/event) is done: kind ``sync_wait``.
SYNC_APIS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
    }
)


def base_api_name(name: str) -> str:
    """``cudaStreamSynchronize_ptsz_v7000`` -> ``cudaStreamSynchronize`` (for classification)."""
    return _API_SUFFIX.sub("", name)


def is_sync_api(name: str) -> bool:
    """True for CUDA runtime/driver calls that wait for the GPU."""
    return base_api_name(name) in SYNC_APIS


def api_category(name: str) -> str:
    """``cuda_runtime`` for ``cudaX``, ``cuda_driver`` for ``cuX``, else ``cuda_api``."""
    if re.match(r"^cuda[A-Z]", name):
        return "cuda_runtime"
    if re.match(r"^cu[A-Z]", name):
        return "cuda_driver"
    return "cuda_api"


_NCCL_KERNEL = re.compile(r"^(?:void\s+)?nccl", re.IGNORECASE)


def is_nccl_kernel(name: str) -> bool:
    """True for NCCL kernels (``ncclKernel_*``, ``ncclDevKernel_*``, ``void nccl...``)."""
    return bool(_NCCL_KERNEL.match(name))


# --- demangling -------------------------------------------------------------------------------
def demangle(names: Sequence[str]) -> tuple[list[str], str]:
    """Demangle C++ symbol names; returns ``(names, how)``.

    ``how`` is ``"cxxfilt"``, ``"c++filt"``, ``"none"`` (nothing to demangle) or
    ``"unavailable"`` (no demangler found; names kept mangled). Names that are not mangled
    (do not start with ``_Z``) are returned unchanged.
    """
    out = list(names)
    idx = [i for i, n in enumerate(out) if isinstance(n, str) and n.startswith("_Z")]
    if not idx:
        return out, "none"
    try:
        import cxxfilt  # type: ignore[import-not-found]

        for i in idx:
            try:
                out[i] = cxxfilt.demangle(out[i])
            except Exception:  # an undemanglable name stays as recorded
                pass
        return out, "cxxfilt"
    except ImportError:
        pass
    exe = shutil.which("c++filt")
    if exe:
        try:
            proc = subprocess.run(
                [exe],
                input="\n".join(out[i] for i in idx) + "\n",
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            lines = proc.stdout.splitlines()
            if len(lines) == len(idx):
                for i, line in zip(idx, lines, strict=False):
                    out[i] = line
                return out, "c++filt"
        except (OSError, subprocess.SubprocessError):
            pass
    return out, "unavailable"


# --- SQLite -----------------------------------------------------------------------------------
def has_sqlite_magic(path: Path) -> bool:
    """True when the file is a regular file that starts with the SQLite 3 header."""
    try:
        check_file(path)
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except (OSError, ReadError):
        return False


def connect_ro(path: Path) -> sqlite3.Connection:
    """Open a SQLite file read-only (URI ``file:...?mode=ro``); ReadError on failure."""
    path = Path(path)
    if check_file(path).st_size == 0:
        raise ReadError(path, "file is empty (0 bytes)")
    if not has_sqlite_magic(path):
        raise ReadError(path, "not a SQLite database (no 'SQLite format 3' header)")
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except SQLITE_ERRORS as exc:
        raise sqlite_error(path, exc) from None
    return con


#: What a damaged database raises from inside sqlite3 (text that is not UTF-8, integers that
#: do not fit, the driver's own errors).
SQLITE_ERRORS = (sqlite3.Error, UnicodeDecodeError, OverflowError)


#: What a value of the wrong type in a damaged database raises in a reader (SQLite keeps any
#: type in any column, so a flipped byte can put text where an integer was).
VALUE_ERRORS = (TypeError, ValueError, OverflowError, KeyError)


def value_error(path: Path, exc: Exception) -> ReadError:
    """A damaged database's wrong-typed value as our ReadError."""
    return ReadError(path, f"damaged database: a value of the wrong type or out of range "
                           f"({type(exc).__name__}: {str(exc)[:120]})")


def sqlite_error(path: Path, exc: Exception) -> ReadError:
    """Turn a sqlite3 exception into our ReadError with a hint."""
    msg = str(exc)
    hint = ""
    if isinstance(exc, UnicodeDecodeError):
        msg, hint = f"text that is not UTF-8 ({exc.reason} at byte {exc.start})", " (the file is damaged)"
    elif "malformed" in msg or "not a database" in msg or "disk I/O" in msg:
        hint = " (the file is damaged or truncated; re-export it from the report)"
    return ReadError(path, f"cannot read the SQLite database: {msg}{hint}")


def sqlite_tables(con: sqlite3.Connection) -> set[str]:
    """Names of the tables in a database."""
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def table_columns(con: sqlite3.Connection, table: str) -> list[str]:
    """Column names of one table (empty when it does not exist)."""
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def sniff_tables(path: Path) -> set[str] | None:
    """Table names of a SQLite file for ``sniff`` (None if not SQLite or unreadable)."""
    if not has_sqlite_magic(path):
        return None
    try:
        con = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            return sqlite_tables(con)
        finally:
            con.close()
    except SQLITE_ERRORS:
        return None


def damaged_sqlite(path: Path, suffixes: Sequence[str]) -> bool:
    """For ``sniff``: a file with one of ``suffixes`` and the SQLite header whose table list
    cannot be read (truncated or corrupt). The reader claims it, so that reading it says what
    is wrong with the database instead of "not a format scalescope knows"."""
    path = Path(path)
    return path.name.lower().endswith(tuple(suffixes)) and has_sqlite_magic(path) and sniff_tables(path) is None


# --- timestamps taken from a database ---------------------------------------------------------
#: Marks a start or end that is not a time in ns (:func:`ns_column`); such rows are dropped.
BAD_NS = np.iinfo(np.int64).min
_NS_LIMIT = 2**62


def ns_column(values: pd.Series) -> np.ndarray:
    """A start/end column as int64 ns, exactly; :data:`BAD_NS` where a value is not an
    integer within ±2**62 ns (text or a blob in SQLite's dynamically typed column, a
    fraction, NULL, infinity, a huge value), never a value wrapped by a cast."""
    if values.dtype == np.int64:
        arr = values.to_numpy(np.int64).copy()
        arr[(arr >= _NS_LIMIT) | (arr <= -_NS_LIMIT)] = BAD_NS
        return arr
    if values.dtype == np.float64:
        f = values.to_numpy(np.float64)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(f) & (np.abs(f) < _NS_LIMIT) & (f == np.floor(f))
        return np.where(ok, np.where(ok, f, 0).astype(np.int64), BAD_NS)

    def one(v: object) -> int:
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return int(v) if -_NS_LIMIT < v < _NS_LIMIT else BAD_NS
        if isinstance(v, (float, np.floating)) and np.isfinite(v) and float(v).is_integer():
            return int(v) if abs(v) < _NS_LIMIT else BAD_NS
        return BAD_NS

    return np.array([one(v) for v in values.tolist()], dtype=np.int64)


def checked_times(raw: pd.DataFrame, path: Path, *, stacklevel: int = 3) -> pd.DataFrame:
    """``raw`` (columns ``start_ns``, ``end_ns`` from :func:`ns_column`) without the rows
    whose start or end is not a time, and a :class:`RecoveryWarning` for those and for the
    events that end before they start (their duration becomes 0, as the other readers do)."""
    start, end = raw["start_ns"].to_numpy(np.int64), raw["end_ns"].to_numpy(np.int64)
    bad = (start == BAD_NS) | (end == BAD_NS)
    notes = []
    if bad.any():
        notes.append(f"{int(bad.sum())} event(s) whose start or end is not a time in ns (text, a "
                     "fraction, NULL or beyond ±2**62) were dropped")
        raw = raw[~bad].reset_index(drop=True)
        start, end = start[~bad], end[~bad]
    back = end < start
    if back.any():
        notes.append(f"{int(back.sum())} event(s) end before they start (end < start); their dur_ns is set to 0")
    if notes:
        warnings.warn(f"{path}: " + "; ".join(notes), RecoveryWarning, stacklevel=stacklevel)
    return raw

"""NVTX ranges for the scalescope phases (domain ``scalescope``), isolated in one module.

Cost model: with no NVTX tool attached the NVTX calls would be wasted work, so
:func:`setup` returns ``None`` unless a tool is attached (``NVTX_INJECTION64_PATH`` /
``NVTX_INJECTION32_PATH`` set, as ``nsys`` and Nsight Compute do) or the caller forces it
(``init(nvtx="force")`` or ``SCALESCOPE_NVTX=force``). ``SCALESCOPE_NVTX=off`` disables it.

Compatibility trap (``shared/FORMATS.md`` §6): ``nvtx`` 0.2.17's ``Domain`` (and the
module-level ``push_range(domain=...)``, which goes through it) returns a ``DummyDomain``
whenever ``nvtxDomainIsEnabled`` is false, which happened under nsys 2023.4.4: no ranges
were recorded at all. So :func:`setup` picks, in order:

1. ``"domain"``: ``nvtx.get_domain("scalescope")`` when it is a real ``Domain``: the
   documented low-overhead path (pre-built ``EventAttributes`` per phase name).
2. ``"handle"``: when a tool is attached but ``get_domain`` answered ``DummyDomain``, the
   extension's ungated functions (``nvtx._lib.lib.DomainHandle``, ``RegisteredString``,
   ``EventAttributes``, ``push_range(attrs, handle)``): ``nvtxDomainRangePushEx`` is called
   whatever ``nvtxDomainIsEnabled`` says.
3. ``"global"``: old ``nvtx`` releases without those: ``nvtx.push_range(message, domain=...)``.

``SCALESCOPE_NVTX=domain|handle|global`` forces one path (for checking under a real
profiler). The chosen path is recorded in ``run.json`` (``nvtx.mode``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from instrumentation._env import warn_once

__all__ = ["DOMAIN", "NvtxRanges", "setup", "tool_attached"]

DOMAIN = "scalescope"

#: ARGB colours per phase, so the nsys timeline is readable at a glance.
COLORS = {
    "data": 0xFF8C8C8C, "forward": 0xFF4C72B0, "backward": 0xFFDD8452, "sync": 0xFFC44E52,
    "optimizer": 0xFF55A868, "step": 0xFF8172B3, "epoch": 0xFF937860, "eval": 0xFFDA8BC3,
}


def tool_attached() -> bool:
    """Whether an NVTX tool (nsys, ncu) is injected into this process."""
    return bool(os.environ.get("NVTX_INJECTION64_PATH") or os.environ.get("NVTX_INJECTION32_PATH"))


class NvtxRanges:
    """Push/pop ranges in the ``scalescope`` domain through one chosen API path."""

    def __init__(self, mode: str, push: Callable[[str], None], pop: Callable[[], None]):
        self.mode = mode
        self.push = push
        self.pop = pop


def _domain_path() -> NvtxRanges | None:
    import nvtx

    dom = nvtx.get_domain(DOMAIN)
    if type(dom).__name__ == "DummyDomain" or not hasattr(dom, "get_event_attributes"):
        return None
    attrs: dict[str, object] = {}

    def push(name: str) -> None:
        a = attrs.get(name)
        if a is None:
            a = attrs[name] = dom.get_event_attributes(message=name, color=COLORS.get(name, 0xFF777777))
        dom.push_range(a)

    return NvtxRanges("domain", push, dom.pop_range)


def _handle_path() -> NvtxRanges | None:
    from nvtx._lib import lib  # the compiled extension, ungated

    handle = lib.DomainHandle(DOMAIN)
    attrs: dict[str, object] = {}
    push_c, pop_c = lib.push_range, lib.pop_range

    def push(name: str) -> None:
        a = attrs.get(name)
        if a is None:
            msg = lib.RegisteredString(handle, name)
            a = attrs[name] = lib.EventAttributes(None, msg, COLORS.get(name, 0xFF777777))
        push_c(a, handle)

    def pop() -> None:
        pop_c(handle)

    return NvtxRanges("handle", push, pop)


def _global_path() -> NvtxRanges | None:
    import nvtx

    def push(name: str) -> None:
        nvtx.push_range(name, domain=DOMAIN)

    def pop() -> None:
        nvtx.pop_range(domain=DOMAIN)

    return NvtxRanges("global", push, pop)


def setup(request: bool | str = True) -> tuple[NvtxRanges | None, str]:
    """Choose the NVTX path for this process.

    Parameters
    ----------
    request
        ``True`` (default): only when a tool is attached; ``"force"``: even without one;
        ``False``: never. ``$SCALESCOPE_NVTX`` (``off``, ``force``, ``domain``, ``handle``,
        ``global``) overrides.

    Returns
    -------
    (NvtxRanges or None, str)
        The ranges object (``None`` when NVTX is off) and a reason / mode string for
        ``run.json``.
    """
    env = (os.environ.get("SCALESCOPE_NVTX") or "").strip().lower()
    if env in ("0", "off", "false", "no"):
        return None, "off: SCALESCOPE_NVTX=off"
    if request is False and env not in ("force", "domain", "handle", "global"):
        return None, "off: init(nvtx=False)"
    forced = env in ("force", "1", "on", "domain", "handle", "global") or request == "force"
    if not forced and not tool_attached():
        return None, "off: no NVTX tool attached (NVTX_INJECTION64_PATH unset)"
    try:
        import nvtx  # noqa: F401
    except Exception as exc:
        return None, f"off: the nvtx package is not importable ({exc})"
    order = {"domain": [_domain_path], "handle": [_handle_path], "global": [_global_path]}.get(
        env, [_domain_path, _handle_path, _global_path]
    )
    for make in order:
        try:
            ranges = make()
        except Exception as exc:
            warn_once(f"nvtx:{make.__name__}", f"NVTX path {make.__name__} unavailable: {exc!r}")
            continue
        if ranges is not None:
            return ranges, ranges.mode
    return None, "off: no usable nvtx API"

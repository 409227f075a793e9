"""The static C of the kernels: runtime/*.h files that compile on their own (tests/
test_c_runtime_headers.py), copied next to the generated model.c and included where a kernel
needs them, as runtime/o2e_gemm.h always was. A header names the runtime headers it needs with
`#include "o2e_....h"`; `include` copies those too."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .emitter import NodeContext

RUNTIME = Path(__file__).parent / "runtime"
_INCLUDE = re.compile(r'^#include "(o2e_\w+\.h)"', re.MULTILINE)


@cache
def needs(header: str) -> tuple[str, ...]:
    """`header` and every runtime header it includes, directly or not."""
    out = [header]
    for dep in _INCLUDE.findall((RUNTIME / header).read_text()):
        out += [h for h in needs(dep) if h not in out]
    return tuple(out)


def include(ctx: NodeContext, header: str) -> None:
    """`#include "header"` once in the generated C, at the place of the first kernel needing
    it (before the code using it), and the header with the ones it includes in the output."""
    ctx.helper(header, f'#include "{header}"\n')
    ctx.require_runtime(*needs(header))

"""Where and what the suite measures: scenarios (loopback or an emulated link, the
sizes, the trees, the data) and the three presets."""

from __future__ import annotations

from dataclasses import dataclass

from _bench_common import MIB
from _tree_files import TreeSpec

KIB = 1 << 10
GIB = 1 << 30
SLOW = (40.0, 20.0)  # the slow line: 40 ms, 20 Mbit/s

TREE_SMALL = TreeSpec(name="1000x16K", files=1000, file_size=16 * KIB, dirs=10)
TREE_TINY = TreeSpec(name="10000x1K", files=10000, file_size=KIB, dirs=100)
TREE_MIXED = TreeSpec(
    name="mixed", files=1000, file_size=16 * KIB, dirs=10, large_files=4, large_size=64 * MIB
)
# A handful, to prove the plumbing: rclone by default runs md5sum over ssh per
# file (~0.5 s each here), and --quick runs in CI.
TREE_QUICK = TreeSpec(name="6x16K", files=6, file_size=16 * KIB, dirs=2)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    label: str
    rtt_ms: float | None  # None: loopback, no emulator
    rate_mbit: float | None
    sizes: tuple[int, ...]
    trees: tuple[TreeSpec, ...] = ()
    data: str = "random"  # or "text": compressible, like logs and source code

    @property
    def link_mb_per_s(self) -> float | None:
        return None if self.rate_mbit is None else self.rate_mbit / 8


@dataclass(frozen=True, kw_only=True)
class Preset:
    scenarios: tuple[Scenario, ...]
    reps: int
    # A 1-byte copy per client, direction and scenario: set-up alone, and the
    # "net of set-up" column. --quick leaves it out for time.
    setup: bool = True


def _link(rtt: float, rate: float, sizes: tuple[int, ...], trees: tuple[TreeSpec, ...] = (),
          data: str = "random") -> Scenario:  # fmt: skip
    rate_label = f"{rate / 1000:g}g" if rate >= 1000 else f"{rate:g}m"
    suffix = "" if data == "random" else f"-{data}"
    return Scenario(label=f"{rtt:g}ms-{rate_label}{suffix}", rtt_ms=rtt, rate_mbit=rate,
                    sizes=sizes, trees=trees, data=data)  # fmt: skip


def _loopback(sizes: tuple[int, ...], trees: tuple[TreeSpec, ...]) -> Scenario:
    return Scenario(label="loopback", rtt_ms=None, rate_mbit=None, sizes=sizes, trees=trees)


STANDARD_SIZES = (8 * MIB, 64 * MIB)
FULL_SIZES = (8 * MIB, 64 * MIB, 256 * MIB, GIB)

PRESETS = {
    # CI's smoke test: plumbing and correctness of every client, no speed claims.
    "quick": Preset(
        scenarios=(_loopback((2 * MIB,), (TREE_QUICK,)), _link(20, 1000, (2 * MIB,))),
        reps=1,
        setup=False,
    ),
    "standard": Preset(
        scenarios=(
            _loopback(STANDARD_SIZES, (TREE_SMALL,)),
            *(_link(rtt, 1000, STANDARD_SIZES) for rtt in (20.0, 100.0, 300.0)),
            _link(*SLOW, (8 * MIB,), data="text"),
            _link(*SLOW, (8 * MIB,)),
        ),
        reps=2,
    ),
    "full": Preset(
        scenarios=(
            _loopback(FULL_SIZES, (TREE_SMALL, TREE_TINY, TREE_MIXED)),
            *(
                _link(rtt, rate, FULL_SIZES, (TREE_SMALL, TREE_TINY, TREE_MIXED))
                for rate in (1000.0, 400.0)
                for rtt in (20.0, 100.0, 300.0)
            ),
            _link(*SLOW, FULL_SIZES, (TREE_SMALL,), data="text"),
            _link(*SLOW, FULL_SIZES, (TREE_SMALL,)),
        ),
        reps=3,
    ),
}

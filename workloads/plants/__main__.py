"""A training program with one planted cause, as a user would write it: `python -m workloads.plants CAUSE`.

For `harness profile -- python -m workloads.plants CAUSE`: plain PyTorch, nothing of the harness, and the
NVTX ranges a user's program has: `step` around each step and, inside it, `data` (the fetch of a planted
batch source, before forward), `forward`, `backward` and `optimizer`. No synchronisation inside the steps
(the one at the end makes the printed time whole). The step is the harness's train step through the same
hooks (workloads.plants), so a capture of the program and of `harness run MODEL --plant CAUSE` hold the same
cause.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

import workloads
from workloads.names import DATA, counted
from workloads.plants import CAUSES, KNOBS, PLANTS, Knobs, make
from workloads.plants.catalogue import MAX_LOADER_WORKERS, OPTIMIZERS

try:
    import nvtx

    def push(name: str) -> None:
        nvtx.push_range(name)

    def pop() -> None:
        nvtx.pop_range()

except ImportError:  # without the nvtx package: torch's own on a CUDA build, else none

    def push(name: str) -> None:
        if torch.cuda.is_available():
            torch.cuda.nvtx.range_push(name)

    def pop() -> None:
        if torch.cuda.is_available():
            torch.cuda.nvtx.range_pop()


@contextlib.contextmanager
def marked(name: str) -> Iterator[None]:
    push(name)
    try:
        yield
    finally:
        pop()


def first_words(doc: str | None) -> str:
    """A docstring's words up to its first colon or full stop."""
    text = " ".join((doc or "").split())
    return text[: min((i for i in (text.find(":"), text.find(". ")) if i >= 0), default=len(text))]


INT64_MAX = 2**63 - 1


def at_least(least: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number of `least` or more, and `most` (else int64's most) or less (a step
    count of 0 timed nothing, and a warm-up of -1 never started the clock: the step time printed was the
    machine's uptime)."""

    def parse(text: str) -> int:
        # int() also reads '1_000', ' 7 ' and other scripts' digits ('١٢' is 12), and refuses over 4,300
        if not re.fullmatch(r"-?[0-9]{1,4000}", text):
            raise argparse.ArgumentTypeError(f"takes a whole number, not {text!r}")
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be {least} or more, got {value}")
        if value > (ceiling := INT64_MAX if most is None else most):
            raise argparse.ArgumentTypeError(f"must be {ceiling} or less, got {value}")
        return value

    return parse


def arguments(argv: list[str] | None) -> argparse.Namespace:
    causes = "\n".join(f"  {name}: {first_words(cls.__doc__)}" for name, cls in PLANTS.items())
    parser = argparse.ArgumentParser(
        prog="python -m workloads.plants",
        description="A training loop with one planted cause.",
        epilog=f"causes:\n{causes}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("cause", choices=list(PLANTS), metavar="CAUSE", help="one of the causes below")
    parser.add_argument("--model", default="tiny", choices=workloads.MODEL_NAMES)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                        help="auto: bf16 autocast on CUDA, fp32 on the CPU")  # fmt: skip
    parser.add_argument("--batch-size", type=at_least(1), default=4)
    parser.add_argument("--steps", type=at_least(1), default=10)
    parser.add_argument("--warmup", type=at_least(0), default=3, help="steps before the timed ones")
    parser.add_argument("--seed", type=int, default=0)
    knobs = parser.add_argument_group("knobs (the fixes a user would make; the cause's own by default)")
    knobs.add_argument("--optimizer", choices=OPTIMIZERS, help="AdamW's implementation")
    knobs.add_argument("--loader-workers", type=at_least(0, MAX_LOADER_WORKERS),
                       help="the slow loader's DataLoader workers")  # fmt: skip
    knobs.add_argument("--pin-memory", action="store_true", default=None, help="pinned, non_blocking copies")
    knobs.add_argument("--loss-every", type=at_least(1), help="host-sync: read the loss every N steps")
    knobs.add_argument("--dynamic-shapes", action="store_true", default=None,
                       help="recompile: the loss compiled for dynamic shapes")  # fmt: skip
    return parser.parse_args(argv)


def knobs_of(args: argparse.Namespace) -> Knobs:
    """The cause's knobs, with those given on the command line over them."""
    given = {k: getattr(args, k) for k in KNOBS if getattr(args, k, None) is not None}
    own = {k: v for k, v in CAUSES[args.cause].settings.items() if k in KNOBS}
    return Knobs(**{**own, **given})


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"--device cuda: this torch ({torch.__version__}) sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    plant = make(args.cause, knobs_of(args))
    if plant.gpu_only and device.type != "cuda":
        print(f"{args.cause} is a GPU cause: run it with --device cuda", file=sys.stderr)
        return 2
    settings: dict[str, Any] = {
        "batch_size": args.batch_size,
        "attention": "sdpa",
        "precision": args.precision
        if args.precision != "auto"
        else "bf16"
        if device.type == "cuda"
        else "fp32",
        **plant.settings,
    }
    torch.manual_seed(args.seed)
    spec = workloads.get_spec(args.model)
    model = workloads.build_model(spec, attention=settings["attention"], seed=args.seed).to(device)
    x, y = workloads.synthetic_batch(
        spec, settings["batch_size"], spec.context_length, device=device,
        generator=torch.Generator().manual_seed(args.seed),
    )  # fmt: skip
    params = [p for p in model.parameters() if p.requires_grad]
    opt = plant.optimizer(params)
    next_batch = plant.batches(x, y, device)
    loss_of = plant.loss(workloads.loss_fn, params)
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = (
        (lambda: torch.autocast(device.type, dtype=torch.bfloat16))
        if settings["precision"] == "bf16"
        else contextlib.nullcontext
    )
    model.train()
    started = 0.0
    with plant.context(device):
        for i in range(args.warmup + args.steps):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                started = time.perf_counter()
            with marked("step"):
                xb, yb = x, y
                if next_batch is not None:
                    with marked(DATA):
                        xb, yb = next_batch()
                with marked("forward"):
                    with autocast():
                        logits = model(xb)
                        loss = loss_of(logits, yb, i)
                    plant.after_loss(logits, loss)
                del logits
                with marked("backward"):
                    loss.backward()
                with marked("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    per_step = (time.perf_counter() - started) / max(args.steps, 1)
    print(
        f"{args.cause}: {args.model} on {device.type}, {counted(args.steps, 'step')}, "
        f"{per_step * 1e3:.1f} ms a step"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

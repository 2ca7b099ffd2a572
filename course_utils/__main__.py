"""Command line: ``python -m course_utils <command>``.

    model     provision the offline default model (and the tiny test model)
    data      regenerate data/ (task prompts and preference pairs)
    rm train  train the reward model on the preference pairs
    ppo       run PPO headless from a config preset and write a report
    bench     measure speed and memory (ours vs TRL) as JSON
    bench-learning  does the laptop preset learn? several seeds, a training-time budget, JSON
    figures   regenerate figures/
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def cmd_model(args: argparse.Namespace) -> None:
    from course_utils.machinery import hub

    start = time.perf_counter()
    folder = hub.resolve_model(args.name)
    print(f"{args.name}: {folder} ({time.perf_counter() - start:.1f} s)")
    if args.name == hub.DEFAULT_MODEL:
        tiny = hub.build_tiny_model()
        print(f"{hub.TINY_MODEL}: {tiny}")
    print(json.dumps(hub.read_manifest(folder), indent=2))


def cmd_data(args: argparse.Namespace) -> None:
    from course_utils import tasks

    manifest = tasks.write_data(args.out) if args.out else tasks.write_data()
    print(json.dumps(manifest, indent=2))


def cmd_rm(args: argparse.Namespace) -> None:
    from course_utils import reward_model

    reward_model.main(args.rm_args)


def cmd_ppo(args: argparse.Namespace) -> None:
    from course_utils import trainer

    trainer.main(args.ppo_args)


def cmd_bench(args: argparse.Namespace) -> None:
    from course_utils.comparison import bench

    bench.main(args.bench_args)


def cmd_bench_learning(args: argparse.Namespace) -> None:
    from course_utils.comparison import bench_learning

    bench_learning.main(args.bench_learning_args)


def cmd_figures(args: argparse.Namespace) -> None:
    from course_utils.lesson_aids import figures

    for path in figures.make_all(args.out):
        print(path)


def cmd_glossary(args: argparse.Namespace) -> None:
    from pathlib import Path

    from course_utils.lesson_aids import glossary

    if not args.readme:
        print(glossary.show_glossary())
        return
    from course_utils.machinery.paths import README as path
    path.write_text(glossary.readme_with_glossary(path.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"updated the glossary table in {path}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course_utils", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("model", help="provision a model (default: the offline SmolLM2-135M-Instruct)")
    p.add_argument("name", nargs="?", default="smollm2-135m-instruct")
    p.set_defaults(func=cmd_model)

    p = sub.add_parser("data", help="regenerate data/")
    p.add_argument("--out", default=None, help="output folder (default: the repository's data/)")
    p.set_defaults(func=cmd_data)

    for name, func, dest in (("rm", cmd_rm, "rm_args"), ("ppo", cmd_ppo, "ppo_args"), ("bench", cmd_bench, "bench_args"),
                             ("bench-learning", cmd_bench_learning, "bench_learning_args")):
        p = sub.add_parser(name, help=f"{name} commands (see `python -m course_utils {name} --help`)", add_help=False)
        p.add_argument(dest, nargs=argparse.REMAINDER)
        p.set_defaults(func=func)

    p = sub.add_parser("glossary", help="print the English-Korean glossary")
    p.add_argument("--readme", action="store_true", help="rewrite the glossary table in README.md instead")
    p.set_defaults(func=cmd_glossary)

    p = sub.add_parser("figures", help="regenerate figures/")
    p.add_argument("--out", default=None)
    p.set_defaults(func=cmd_figures)
    return parser


PASS_THROUGH = {"rm": cmd_rm, "ppo": cmd_ppo, "bench": cmd_bench, "bench-learning": cmd_bench_learning}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in PASS_THROUGH:
        # These commands own their options (`python -m course_utils ppo --help`).
        dest = {"rm": "rm_args", "ppo": "ppo_args", "bench": "bench_args",
                "bench-learning": "bench_learning_args"}[argv[0]]
        PASS_THROUGH[argv[0]](argparse.Namespace(**{dest: argv[1:]}))
        return
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())

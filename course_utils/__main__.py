"""Command line: ``python -m course_utils <command> [options]``; the commands are the table
``COMMANDS`` at the end of this file, and each one answers ``--help``."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time


def cmd_model(argv: list[str]) -> None:
    from course_utils.machinery import hub

    parser = argparse.ArgumentParser(prog="python -m course_utils model", description=COMMANDS["model"][0])
    parser.add_argument("name", nargs="?", default=hub.DEFAULT_MODEL)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    folder = hub.resolve_model(args.name)
    print(f"{args.name}: {folder} ({time.perf_counter() - start:.1f} s)")
    if args.name == hub.DEFAULT_MODEL:
        print(f"{hub.TINY_MODEL}: {hub.build_tiny_model()}")
    print(json.dumps(hub.read_manifest(folder), indent=2))


def cmd_data(argv: list[str]) -> None:
    from course_utils.machinery import data_files

    parser = argparse.ArgumentParser(prog="python -m course_utils data", description=COMMANDS["data"][0])
    parser.add_argument("--out", default=None, help="output folder (default: the repository's data/)")
    args = parser.parse_args(argv)
    if args.out is not None:  # checked before any file is written
        from pathlib import Path

        from course_utils.machinery import safe_files

        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out {out} is a file, not a folder: give the folder for the data files, "
                             f"e.g. --out {out.with_suffix('')}_data")
        safe_files.check_writable(out, "choose another --out")
    print(json.dumps(data_files.write_data(args.out), indent=2))


def cmd_rm(argv: list[str]) -> None:
    from course_utils import reward_model

    reward_model.main(argv)


def cmd_sft(argv: list[str]) -> None:
    from course_utils import sft

    sft.main(argv)


def cmd_ppo(argv: list[str]) -> None:
    from course_utils import trainer

    trainer.main(argv)


def cmd_bench(argv: list[str]) -> None:
    from course_utils.comparison import bench

    bench.main(argv)


def cmd_bench_learning(argv: list[str]) -> None:
    from course_utils.comparison import bench_learning

    bench_learning.main(argv)


def cmd_measure(argv: list[str]) -> None:
    from course_utils.comparison import sampled_measures

    sampled_measures.main(argv)


def cmd_design1(argv: list[str]) -> None:
    from course_utils.comparison import rl_after_sft

    rl_after_sft.main(argv)


def cmd_export(argv: list[str]) -> None:
    from course_utils.comparison import engines

    engines.main(argv)


def cmd_translate(argv: list[str]) -> None:
    from course_utils.machinery import translations

    translations.main(argv)


def cmd_site(argv: list[str]) -> None:
    from course_utils.machinery import site

    site.main(argv)


def cmd_lessons(argv: list[str]) -> None:
    from course_utils.machinery import lesson_runner

    lesson_runner.main(argv)


def cmd_figures(argv: list[str]) -> None:
    from course_utils.lesson_aids import figures

    parser = argparse.ArgumentParser(prog="python -m course_utils figures", description=COMMANDS["figures"][0])
    parser.add_argument("--out", default=None)
    for path in figures.make_all(parser.parse_args(argv).out):
        print(path)


def cmd_glossary(argv: list[str]) -> None:
    from course_utils.lesson_aids import glossary
    from course_utils.machinery.paths import README, README_KO

    parser = argparse.ArgumentParser(prog="python -m course_utils glossary", description=COMMANDS["glossary"][0])
    parser.add_argument("--readme", action="store_true", help="rewrite the glossary table in README.md "
                        "(with --lang ko: in README.ko.md) instead")
    parser.add_argument("--lang", choices=glossary.LANGUAGES, default="en",
                        help="the language of the header and the meanings (ko: Korean)")
    args = parser.parse_args(argv)
    if not args.readme:
        print(glossary.show_glossary(lang=args.lang))
        return
    readme = README_KO if args.lang == "ko" else README
    readme.write_text(glossary.readme_with_glossary(readme.read_text(encoding="utf-8"), args.lang), encoding="utf-8")
    print(f"updated the glossary table in {readme}")


def cmd_clean_notebooks(argv: list[str]) -> None:
    from course_utils.machinery import notebook_clean

    notebook_clean.main(argv)


# The one table of commands: name -> (what it does, the function that takes its arguments).
# Each command parses its own options (`python -m course_utils ppo --help`).
COMMANDS = {
    "model": ("provision a model (default: the offline SmolLM2-135M-Instruct, and the tiny test model)", cmd_model),
    "data": ("regenerate data/", cmd_data),
    "rm": ("reward model: rm train / rm eval", cmd_rm),
    "sft": ("the SFT warm-up: LoRA on train-split gold answers, saved as PPO's start", cmd_sft),
    "ppo": ("run PPO headless from a config preset", cmd_ppo),
    "bench": ("speed and memory, ours vs TRL, as JSON", cmd_bench),
    "bench-learning": ("does a preset learn? seeds x a training-time budget", cmd_bench_learning),
    "measure": ("pass@1, pass@k and token entropy of finished runs' policies, sampled on a held-out split",
                cmd_measure),
    "design1": ("lesson 11's design 1, RL after the best SFT: add a seed's runs to the record, or decide", cmd_design1),
    "export": ("write the tasks, the checker and a preset for another engine: export verl --out DIR", cmd_export),
    "translate": ("the Korean lessons: merge notebooks/translations/ko/*.yaml into notebooks/ko/ (--check: drift, for CI)",
                  cmd_translate),
    "site": ("build the course site from the executed notebooks into build/site/ (offline, no re-run)", cmd_site),
    "lessons": ("run every lesson headless, in order, into build/lessons/ with a report (the instructor's check)",
                cmd_lessons),
    "figures": ("regenerate figures/", cmd_figures),
    "glossary": ("print the English-Korean glossary (--readme: rewrite README's table; --lang ko: README.ko.md's)", cmd_glossary),
    "clean-notebooks": ("strip execution timestamps from notebooks/ (--check: only report, for CI)",
                        cmd_clean_notebooks),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {about}" for name, (about, _) in COMMANDS.items()]
    return "usage: python -m course_utils <command> [options]   (<command> --help for its options)\n\n" + "\n".join(lines)


DEBUG_ENV_VAR = "COURSE_DEBUG"


def quiet_libraries() -> None:
    """Keep transformers' loading bars and deprecation notices out of the command line's output
    (the notebooks do the same); our own progress bars and summaries stay."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*generation flags.*")
    # An update whose KL early stop fired before its first step steps the per-update learning-rate
    # schedule without an optimizer step, on purpose (the schedule counts updates, not steps).
    warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()` before `optimizer.step()`")


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "bad input" (a config value, a file, a model folder, a device this
    machine lacks), not a bug."""
    import yaml

    from course_utils.device import DeviceUnavailableError
    from course_utils.machinery.checkpoint import DamagedCheckpointError

    return (ValueError, FileNotFoundError, NotADirectoryError, yaml.YAMLError, DamagedCheckpointError,
            DeviceUnavailableError)


# System errors that are the machine's state or a path given, not a bug: a full disk, a read-only
# or foreign folder, a file where a folder was meant.
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST,
               errno.EISDIR)
INTERRUPTED_EXIT = 130  # the shell's code for a process ended by SIGINT (Ctrl-C)


def disk_error_line(error: OSError) -> str:
    """The one line for a write the system refused, with the fix for its cause. Checkpoints and the
    SFT model are written atomically, so what was there before the failed write is still whole."""
    where = f" {error.filename}" if error.filename else ""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free disk space, or choose another output folder"
    elif error.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        fix = "a file stands where a folder is needed (or the reverse): choose another path"
    else:
        fix = "make the folder writable, or choose another output folder"
    return (f"could not write{where}: {error.strerror or error}. Fix: {fix}; the last complete checkpoint or "
            "model is intact")


def error_line(error: BaseException) -> str:
    """An exception's message on one line (a message may span lines; a terminal shows one)."""
    return " ".join(str(error).split()) or type(error).__name__


def fail(message: str, code: int) -> None:
    print(f"{message}  (--debug shows the traceback)" if code == 2 else message, file=sys.stderr)
    sys.exit(code)


def one_line_usage_errors(name: str):
    """argparse answers a bad option with its usage block and then the error: two lines or more,
    the fix in neither. Within a command it says the error and where the options are, in one line."""
    from contextlib import contextmanager

    @contextmanager
    def patched():
        original = argparse.ArgumentParser.error

        def error(parser, message):
            parser.exit(2, f"error: {message}; see `python -m course_utils {name} --help` for the options\n")

        argparse.ArgumentParser.error = error
        try:
            yield
        finally:
            argparse.ArgumentParser.error = original

    return patched()


def run_command(name: str, argv: list[str], debug: bool) -> None:
    """Run one command; bad input, a refused write and Ctrl-C end in one line (see ``main``)."""
    try:
        with one_line_usage_errors(name):
            COMMANDS[name][1](argv)
    except (*user_errors(), OSError) as error:
        if debug:
            raise
        if isinstance(error, OSError) and error.errno in DISK_ERRNOS:  # raised by the system, with its errno
            fail(f"error: {disk_error_line(error)}", 2)
        if not isinstance(error, user_errors()):
            raise
        fail(f"error: {error_line(error)}", 2)
    except KeyboardInterrupt as interrupted:
        from course_utils.machinery.safe_files import Interrupted

        if debug:
            raise
        message = error_line(interrupted) if isinstance(interrupted, Interrupted) else \
            f"interrupted (Ctrl-C) during `{name}`; rerun the same command to do it again"
        fail(message, INTERRUPTED_EXIT)


def main(argv: list[str] | None = None) -> None:
    """Run one command. Bad input ends with one line, ``error: ...`` naming the fix, and exit
    status 2; a write the disk refuses (full, read-only) likewise; Ctrl-C ends with one line on what
    was kept and how to continue, exit status 130. ``--debug`` (anywhere on the line) or
    ``COURSE_DEBUG=1`` shows the traceback instead."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV_VAR, "0") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(usage())
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nerror: unknown command {argv[0]!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
            sys.exit(2)
        return
    quiet_libraries()
    run_command(argv[0], argv[1:], debug)


if __name__ == "__main__":
    sys.exit(main())

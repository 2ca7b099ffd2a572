"""Write tests/data/framework_names.json: the names OpenRLHF, verl and TRL really define.

tests/test_framework_mapping.py checks every flag, key and field that
docs/trl_config_mapping.md names against this snapshot, so the snapshot must come from the
projects' own definitions, never from memory:

* OpenRLHF: every option string given to ``add_argument`` in ``openrlhf/cli/train_ppo_ray.py``
  (read with ``ast``, not by running it: OpenRLHF needs Ray and GPUs). Options added inside a
  ``for prefix in ("actor", "critic")`` loop are expanded for each value of the loop.
  Two revisions are read: the release the doc's tables use (dotted names such as
  ``--actor.eps_clip``) and the last release with the older flat names (``--eps_clip``), for
  the doc's rename table.
* verl: ``verl/trainer/config/_generated_ppo_trainer.yaml``, the config that Hydra composes from
  ``ppo_trainer.yaml`` and its ``defaults`` list (actor, rollout, critic, data, ... files), which
  verl writes out flattened with ``scripts/generate_trainer_config.sh``. Every mapping node and
  leaf becomes a dotted path (``algorithm.kl_ctrl.type``). Read from a git mirror at a tag
  (``--verl``) or from the release's wheel as PyPI serves it (``--verl-wheel``, recorded with the
  wheel's sha256), for releases newer than the mirror at hand (v0.9.1 was read that way).
* TRL: ``dataclasses.fields`` of the installed ``trl.experimental.ppo.PPOConfig`` (which
  includes ``transformers.TrainingArguments``) and the parameters of ``PPOTrainer.__init__``.
  The script refuses any TRL other than 1.12.0.

Regenerate (git mirrors with tags, e.g. ``git clone --mirror https://github.com/OpenRLHF/OpenRLHF``
and ``git clone --mirror https://github.com/volcengine/verl``, or verl's wheel from
``pip download verl==0.9.1 --no-deps -d /tmp/verl``)::

    TRL_EXPERIMENTAL_SILENCE=1 HF_HUB_OFFLINE=1 .venv/bin/python tests/data/make_framework_names.py \\
        --openrlhf /path/to/OpenRLHF.git --verl-wheel /tmp/verl/verl-0.9.1-py3-none-any.whl

then update the commits named in the header of docs/trl_config_mapping.md if the revisions changed.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import yaml

OPENRLHF_PATH = "openrlhf/cli/train_ppo_ray.py"
VERL_PATH = "verl/trainer/config/_generated_ppo_trainer.yaml"
TRL_VERSION = "1.12.0"
OUT = Path(__file__).with_name("framework_names.json")


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True).stdout


def resolve(git_dir: str, rev: str) -> str:
    return git(git_dir, "rev-parse", f"{rev}^{{commit}}").strip()


def _string_values(node: ast.expr, env: dict[str, str]) -> str | None:
    """The value of a string literal or of an f-string whose names are loop variables in env."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for piece in node.values:
            if isinstance(piece, ast.Constant):
                parts.append(str(piece.value))
            elif (isinstance(piece, ast.FormattedValue) and isinstance(piece.value, ast.Name)
                  and piece.value.id in env):
                parts.append(env[piece.value.id])
            else:
                raise ValueError(f"cannot evaluate the option string {ast.unparse(node)}")
        return "".join(parts)
    return None


def argparse_flags(source: str) -> list[str]:
    """Every option string passed to an ``add_argument`` call, without the leading dashes."""
    tree = ast.parse(source)
    flags: set[str] = set()

    def visit(node: ast.AST, env: dict[str, str]) -> None:
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
                and isinstance(node.iter, (ast.Tuple, ast.List))
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts)):
            for elt in node.iter.elts:
                for child in node.body:
                    visit(child, {**env, node.target.id: elt.value})
            for child in node.orelse:
                visit(child, env)
            return
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            for arg in node.args:
                value = _string_values(arg, env)
                if value is not None and value.startswith("-"):
                    flags.add(value.lstrip("-"))
        for child in ast.iter_child_nodes(node):
            visit(child, env)

    visit(tree, {})
    return sorted(flags)


def yaml_keys(text: str) -> list[str]:
    """Every dotted path of a YAML mapping: inner nodes and leaves (lists count as leaves)."""
    keys: set[str] = set()

    def walk(value, prefix: str) -> None:
        if prefix:
            keys.add(prefix)
        if isinstance(value, dict):
            for key, child in value.items():
                walk(child, f"{prefix}.{key}" if prefix else str(key))

    walk(yaml.safe_load(text), "")
    return sorted(keys)


def verl_from_wheel(wheel: Path) -> dict:
    """The verl entry read from a release wheel: its version (``verl/version/version``), its sha256
    (the doc names it, as it names commits), and the keys of the generated trainer config."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as archive:
        version = archive.read("verl/version/version").decode().strip()
        keys = yaml_keys(archive.read(VERL_PATH).decode())
    return {"source": f"{wheel.name} sha256={digest}:{VERL_PATH}", "revision": f"v{version}", "keys": keys}


def trl_names() -> dict:
    import dataclasses
    import inspect

    import trl
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    if trl.__version__ != TRL_VERSION:
        raise SystemExit(f"trl {trl.__version__} is installed; the snapshot is for trl {TRL_VERSION}")
    params = [p for p in inspect.signature(PPOTrainer.__init__).parameters if p != "self"]
    return {"version": trl.__version__,
            "source": "dataclasses.fields(trl.experimental.ppo.PPOConfig), "
                      "inspect.signature(trl.experimental.ppo.PPOTrainer.__init__)",
            "fields": sorted(f.name for f in dataclasses.fields(PPOConfig)),
            "trainer_args": sorted(params)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--openrlhf", required=True, help="git directory of an OpenRLHF mirror")
    parser.add_argument("--openrlhf-rev", default="v0.11.0", help="revision the doc's tables use")
    parser.add_argument("--openrlhf-flat-rev", default="v0.10.1",
                        help="last revision with the flat (undotted) flag names")
    verl = parser.add_mutually_exclusive_group(required=True)
    verl.add_argument("--verl", help="git directory of a verl mirror (read at --verl-rev)")
    verl.add_argument("--verl-wheel", type=Path, help="verl's wheel as PyPI serves it (verl-X-py3-none-any.whl)")
    parser.add_argument("--verl-rev", default="v0.7.0")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    snapshot = {}
    for key, rev in (("openrlhf", args.openrlhf_rev), ("openrlhf_flat", args.openrlhf_flat_rev)):
        commit = resolve(args.openrlhf, rev)
        snapshot[key] = {"source": f"OpenRLHF/OpenRLHF@{commit}:{OPENRLHF_PATH}", "revision": rev,
                         "flags": argparse_flags(git(args.openrlhf, "show", f"{commit}:{OPENRLHF_PATH}"))}
    if args.verl_wheel:
        snapshot["verl"] = verl_from_wheel(args.verl_wheel)
    else:
        commit = resolve(args.verl, args.verl_rev)
        snapshot["verl"] = {"source": f"volcengine/verl@{commit}:{VERL_PATH}", "revision": args.verl_rev,
                            "keys": yaml_keys(git(args.verl, "show", f"{commit}:{VERL_PATH}"))}
    snapshot["trl"] = trl_names()
    args.out.write_text(json.dumps(snapshot, indent=1) + "\n")
    counts = {k: len(v.get("flags") or v.get("keys") or v.get("fields")) for k, v in snapshot.items()}
    print(f"wrote {args.out}: {counts}")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The GPU check of issue 33 (tests/device/cuda_check.py says what it runs and prints), for a machine
# with an NVIDIA GPU, from the repository root; ends within 5 minutes or is stopped.
#   bash tests/device/run.sh
# Through the device tool of this workplace (a session with a GPU lent), with the tiny model carried:
#   run(command="bash tests/device/run.sh", carry=[".device"], timeout_s=330)
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec timeout 300 python3 tests/device/cuda_check.py

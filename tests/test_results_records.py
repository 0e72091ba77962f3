"""The benchmark records under benchmarks/results/ name the machine, the date, the command and
the versions: no absolute paths of the machines they ran on, and no fields named after how the
work was organised."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers import pattern_test

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

#: An absolute path on a machine: a top-level folder of a Unix file system (or a home folder, a
#: Windows drive) at the start of a path, or a Python installation's site-packages folder.
#: Paths inside a source tree (``external/xla+/xla/tsl/...``) and RPC names
#: (``/xla.coordination.CoordinationService/WatchTasks``) are not machine paths.
ABSOLUTE_PATH = re.compile(
    r"(?<![\w.+~<>/-])/(?:home|root|tmp|work|workspace|opt|usr|var|mnt|media|srv|scratch|data|lustre|gpfs"
    r"|nfs|proc|sys|dev|etc|lib|lib64|bin|sbin|run|snap|private|Users|Volumes)/[\w.+-]"
    r"|~/[\w.-]|\b[A-Za-z]:\\[\w]|/(?:dist|site)-packages/|\bsite-packages/"
)


def _process_words(text: str):
    """The words of ``text`` that name the work that produced a record rather than what it
    measured: test_docs.py's list, applied also to identifiers (``a_b`` read as ``a b``)."""
    from test_docs import DEVELOPMENT_WORDS

    return [m.group(0) for m in DEVELOPMENT_WORDS.finditer(text.replace("_", " "))]


def _text_files():
    for path in sorted(RESULTS.rglob("*")):
        if not path.is_file():
            continue
        try:
            yield path, path.read_text()
        except UnicodeDecodeError:  # images
            continue


test_the_path_pattern = pattern_test(
    ABSOLUTE_PATH,
    found=[
        'File "/work/main/tests/gpu/native_cases.py", line 3',
        "'/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2'",
        "-w /tmp/whl-native",
        "PYTHONPATH=/tmp/jn python",
        "Looking for a CUDA compiler - /usr/local/bin/nvcc",
    ],
    not_found=[
        "external/xla+/xla/tsl/distributed_runtime/rpc/grpc_util.h:89",
        "RPC /xla.coordination.CoordinationService/WatchTasks",
        "<site-packages>/nvidia/nccl/lib/libnccl.so.2",
        "benchmarks/results/h200x1/2026-12-01/lu.jsonl",
        "tests/gpu/native_cases.py",
        "N/A and 1/2 and 16,384 / 2",
    ],
)


def test_records_carry_no_absolute_machine_paths():
    found = []
    for path, text in _text_files():
        for number, line in enumerate(text.splitlines(), 1):
            match = ABSOLUTE_PATH.search(line)
            if match:
                context = line[max(0, match.start() - 40) : match.end() + 60]
                found.append(f"{path.relative_to(ROOT)}:{number}: ...{context}...")
    assert not found, (
        f"{len(found)} lines name a machine's absolute path; write what it stands for "
        "(<site-packages>, a path relative to the repository, ...):\n" + "\n".join(found[:60])
    )


def test_record_fields_name_what_was_measured():
    found = []
    for path, text in _text_files():
        if path.suffix == ".jsonl":
            for number, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    found += [
                        f"{path.relative_to(ROOT)}:{number}: field {key!r}"
                        for key in json.loads(line)
                        if _process_words(key)
                    ]
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {word!r}" for word in _process_words(line)]
    assert not found, "\n".join(found[:60])

"""Time an exported candidate folder with only the TVM runtime, and write ``results.jsonl``.

Run on the measuring machine (the GPU box), where only the runtime bundle is installed::

    python -m tvm_hetero.runtime.offline_runner FOLDER

Imports nothing of tvm-hetero beyond this package's runtime-only modules.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

MANIFEST = "manifest.json"
RESULTS = "results.jsonl"


def run_folder(folder: str | Path) -> tuple[int, list[str]]:
    """Time every entry of the manifest; returns (records written, errors)."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from tvm_hetero.profiling.fingerprint import local_fingerprint
    from tvm_hetero.profiling.record import ProfileRecord, RecordKind
    from tvm_hetero.runtime.cuda import cuda_device
    from tvm_hetero.runtime.measure import MeasureConfig, adaptive, random_args

    folder = Path(folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    config = MeasureConfig(**manifest["config"])
    written, errors = 0, []
    with open(folder / RESULTS, "a") as out:
        for i, entry in enumerate(manifest["entries"], 1):
            dev_info = entry["device"]
            kind, index = dev_info["kind"], dev_info["index"]
            print(f"[{i}/{len(manifest['entries'])}] {entry['lib']}", flush=True)
            try:
                dev = cuda_device(index) if kind == "cuda" else tvm.cpu(index)
                vm = VirtualMachine(tvm.runtime.load_module(str(folder / entry["lib"])), [dev])
                args = [tvm.runtime.tensor(a, dev) for a in random_args(entry["inputs"])]
                timing = adaptive(
                    lambda n, r, vm=vm, dev=dev, args=args: vm.time_evaluator(
                        "main", dev, number=n, repeat=r
                    )(*args),
                    config,
                )
            except Exception as err:  # one broken candidate must not stop the others
                errors.append(f"{entry['lib']}: {type(err).__name__}: {err}")
                traceback.print_exc()
                continue
            fp = local_fingerprint(
                "cuda" if kind == "cuda" else "cpu",
                index,
                dev_info.get("threads"),
                dev_info.get("llvm_cpu", ""),
            )
            record = ProfileRecord(
                RecordKind(entry["kind"]), entry["workload_key"], entry["workload"],
                entry["target"], entry["mode"], fp.to_dict(), fp.key, timing.samples_s,
                timing.number, len(timing.samples_s),
                extra={"offline": True, "sample_ms": config.min_repeat_ms},
            )  # fmt: skip
            out.write(record.to_json() + "\n")
            written += 1
    return written, errors


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit 1 if any candidate failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="folder with manifest.json and the exported libraries")
    args = parser.parse_args(argv)
    written, errors = run_folder(args.folder)
    print(f"wrote {written} record(s) to {Path(args.folder) / RESULTS}; {len(errors)} failed")
    for e in errors:
        print("FAILED", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

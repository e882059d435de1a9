#!/usr/bin/env bash
# Check and unpack the carried parts: PARTS_DIR/partNN (+ SHA256SUMS) joined into site.tar.xz, unpacked with
# Python's own tarfile (no xz tool needed) into DEST/site. Used by run_on_gpu.sh and check_install.sh alike.
#     bash benchmarks/verl_smoke/unpack_site.sh PARTS_DIR DEST
set -euo pipefail
PARTS="$1"
DEST="$2"
PY="${PYTHON:-python3}"
(cd "$PARTS" && sha256sum -c --quiet <(grep ' part' SHA256SUMS))
rm -rf "$DEST" && mkdir -p "$DEST"
cat "$PARTS"/part* > "$DEST/site.tar.xz"
echo "$(grep ' site.tar.xz' "$PARTS/SHA256SUMS" | cut -d' ' -f1)  $DEST/site.tar.xz" | sha256sum -c --quiet
"$PY" - "$DEST" <<'EOF'
import sys, tarfile, time
started = time.time()
with tarfile.open(f"{sys.argv[1]}/site.tar.xz") as archive:
    archive.extractall(sys.argv[1], filter="fully_trusted")
print(f"unpacked the site in {time.time() - started:.1f} s")
EOF
rm "$DEST/site.tar.xz"

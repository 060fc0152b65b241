#!/usr/bin/env bash
# Build ASTRA-sim's analytical (congestion-unaware) backend from pinned sources, export the DLRM 8-rank trace set
# as Chakra ET with tracekit, and simulate one step (replay mode and roofline mode, with the export's
# communicator-groups file); optionally drive both Chakra feeders over the same files.
#
# Nothing of ASTRA-sim or Chakra is kept in this repository: the script clones git repositories that are already
# on this machine (MIRROR/OWNER+NAME/repo, the layout the project's fetch tool writes; any directory of clones
# laid out that way works), checks out the commits below, applies the three local fixes that commit needs to
# compile against Debian's protobuf 3.21, and builds under WORK. Needs: git, cmake, g++, protoc + libprotobuf-dev.
#
#   bench/astra_sim_dlrm.sh [build|export|simulate|feeders|all]   (default: all)
#
# Environment: MIRROR (default /work/.mirror), WORK (default /tmp/astra-sim-dlrm), TRACES (the DLRM set, default
# /work/shared/traces/multirank/dlrm_8ranks_v100), CLIENTS (driver.cpp, driver_v3.cpp and astra-run/ configs,
# default /work/shared/clients), JOBS (make jobs, default 2), PYTHON (default /work/venv/bin/python).
# Results: docs/exports.md ("Chakra ET in ASTRA-sim").
set -euo pipefail

MIRROR=${MIRROR:-/work/.mirror}
WORK=${WORK:-/tmp/astra-sim-dlrm}
TRACES=${TRACES:-/work/shared/traces/multirank/dlrm_8ranks_v100}
CLIENTS=${CLIENTS:-/work/shared/clients}
JOBS=${JOBS:-2}
PYTHON=${PYTHON:-/work/venv/bin/python}
REPO=$(cd "$(dirname "$0")/.." && pwd)
SRC=$WORK/astra-sim

# The commits the run in docs/exports.md used (astra-sim c0cf6d6 pins chakra 0cce9a4 and analytical 599a047, which
# pins yaml-cpp 3d2888c; spdlog's pinned commit is not in every mirror, its HEAD builds).
ASTRA_COMMIT=c0cf6d6
SUBMODULES=(
  "extern/graph_frontend/chakra astra-sim+chakra 0cce9a4"
  "extern/network_backend/analytical astra-sim+astra-network-analytical 599a047"
  "extern/remote_memory_backend/analytical astra-sim+astra-memory-analytical 641cce8"
  "extern/helper/fmt fmtlib+fmt 7e73566"
  "extern/helper/spdlog gabime+spdlog HEAD"
  "extern/network_backend/analytical/extern/yaml-cpp jbeder+yaml-cpp 3d2888c"
)
LEGACY_CHAKRA="mlcommons+chakra 21585d8"

clone() {  # clone MIRROR/$1/repo into $2 at commit $3
  [[ -d "$MIRROR/$1/repo" ]] || { echo "astra_sim_dlrm: $MIRROR/$1/repo is missing (fetch ${1/+//} first)" >&2; exit 2; }
  rm -rf "$2"
  git clone -q "$MIRROR/$1/repo" "$2"
  git -C "$2" -c advice.detachedHead=false checkout -q "$3" 2>/dev/null || git -C "$2" checkout -q "$3"
}

build() {
  mkdir -p "$WORK"
  clone astra-sim+astra-sim "$SRC" "$ASTRA_COMMIT" || true  # test data blobs absent from a mirror are not needed
  for entry in "${SUBMODULES[@]}"; do
    set -- $entry
    clone "$2" "$SRC/$1" "$3"
  done
  # Local fixes (the upstream commit does not compile as it is):
  # 1. Workload still names the pre-FeederV3 types: Chakra::ETFeeder(Node) -> Chakra::FeederV3::ETFeeder(Node).
  grep -rlE 'Chakra::ETFeeder' "$SRC/astra-sim" | xargs sed -i -E 's/Chakra::ETFeeder(Node)?\b/Chakra::FeederV3::ETFeeder\1/g'
  # 2. Workload.cc stores torch process groups in a member that does not exist (comm_group[pgName]).
  sed -i 's/this->comm_group\[pgName\] = cg;/this->comm_groups[std::stoi(pgName) + 1] = cg;/' \
    "$SRC/astra-sim/workload/Workload.cc"
  # 3. Any absl link lines (protobuf >= 22 needs them; Debian 12's protobuf 3.21 has none to link).
  sed -i '/absl/d' "$SRC/CMakeLists.txt"
  local proto_dir=$SRC/extern/graph_frontend/chakra/schema/protobuf
  protoc et_def.proto --proto_path="$proto_dir" --cpp_out="$proto_dir"
  mkdir -p "$SRC/build/astra_analytical/build"
  (cd "$SRC/build/astra_analytical/build" &&
    cmake .. -DBUILDTARGET=congestion_unaware -DCMAKE_BUILD_TYPE=Release > "$WORK/cmake.log" &&
    nice cmake --build . -j "$JOBS" > "$WORK/build.log" 2>&1) ||
    { tail -30 "$WORK/build.log" >&2; exit 1; }
  ls -l "$SRC/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Unaware"
}

export_et() {
  rm -rf "$WORK/et" && mkdir -p "$WORK/et"
  (cd "$REPO" && PYTHONPATH=$REPO nice "$PYTHON" -m tracekit.cli export chakra "$TRACES" -o "$WORK/et" --prefix dlrm)
  (cd "$REPO" && PYTHONPATH=$REPO nice "$PYTHON" -m tracekit.cli export chakra "$TRACES" -o "$WORK/et-data" \
    --prefix dlrm --data-deps)
}

simulate() {
  local bin=$SRC/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Unaware
  # Roofline at the V100 SXM2's fp32 peak and HBM bandwidth (queries/data/device_peaks.csv): the export's
  # fallback for kernels without an op model (num_ops from the measured duration at that peak) then runs each such
  # kernel for its measured duration. system_roofline.json of the clients (900 TFLOP/s, 1600 GB/s) runs too.
  "$PYTHON" -c 'import json, sys; c = json.load(open(sys.argv[1])); c.update({"peak-perf": 15.7, "local-mem-bw": 900})
json.dump(c, open(sys.argv[2], "w"), indent=1)' "$CLIENTS/astra-run/system_roofline.json" "$WORK/system_roofline_v100.json"
  for system in "$CLIENTS/astra-run/system_replay.json" "$CLIENTS/astra-run/system_roofline.json" \
                "$WORK/system_roofline_v100.json"; do
    local name
    name=$(basename "$system" .json)
    echo "== $name: 8 ranks, ring of 8 (network8.yml)"
    (cd "$WORK" && nice "$bin" --workload-configuration="$WORK/et/dlrm" --system-configuration="$system" \
      --remote-memory-configuration="$CLIENTS/astra-run/mem.json" \
      --network-configuration="$CLIENTS/astra-run/network8.yml" \
      --comm-group-configuration="$WORK/et/dlrm.comm_groups.json" > "$WORK/$name.log" 2>&1) || true  # log/ lands in WORK
    grep -E "finished|critical|error|what\(\)" "$WORK/$name.log" | sed 's/^\[[^]]*\] //' | head -20
  done
}

feeders() {
  local chakra=$SRC/extern/graph_frontend/chakra
  # FeederV3 (the feeder ASTRA-sim links), over the default export (ctrl_deps).
  nice g++ -O2 -std=c++17 -w -o "$WORK/driver_v3" "$CLIENTS/driver_v3.cpp" "$chakra"/src/feeder_v3/*.cpp \
    "$chakra/schema/protobuf/et_def.pb.cc" "$chakra/src/third_party/utils/protoio.cc" \
    -I"$chakra" -I"$chakra/schema/protobuf" -I"$chakra/src/third_party/utils" -lprotobuf -lpthread
  echo "== FeederV3 (driver_v3), default export"
  "$WORK/driver_v3" "$WORK"/et/dlrm.*.et || true
  # mlcommons' legacy ETFeeder, which follows data_deps only, over the --data-deps export.
  set -- $LEGACY_CHAKRA
  clone "$1" "$WORK/chakra-legacy" "$2"
  local legacy=$WORK/chakra-legacy
  protoc et_def.proto --proto_path="$legacy/schema/protobuf" --cpp_out="$legacy/schema/protobuf"
  nice g++ -O2 -std=c++17 -w -o "$WORK/driver" "$CLIENTS/driver.cpp" "$legacy"/src/feeder/et_feeder*.cpp \
    "$legacy/schema/protobuf/et_def.pb.cc" "$legacy/src/third_party/utils/protoio.cc" \
    -I"$legacy/src/feeder" -I"$legacy" -I"$legacy/schema/protobuf" -I"$legacy/src/third_party/utils" -lprotobuf -lpthread
  echo "== legacy ETFeeder (driver), --data-deps export"
  "$WORK/driver" "$WORK"/et-data/dlrm.*.et || true
}

case "${1:-all}" in
  build) build ;;
  export) export_et ;;
  simulate) simulate ;;
  feeders) feeders ;;
  all) build; export_et; simulate; feeders ;;
  *) echo "astra_sim_dlrm: unknown step ${1}: build, export, simulate, feeders or all" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Fails when an #include points up the layer order (docs/architecture.md, "Layers and folders").
#
# Each folder of src/ is a layer; a file may include its own layer, the layers below it, and the
# public headers (include/tierkv/). The public headers include only each other. Layers, bottom
# first:
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

layers=(common config transfer memory device ssd master metrics transport store client rpc connector)

declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

status=0
for dir in src/*/; do
  layer=$(basename "$dir")
  if [[ -z "${rank[$layer]+set}" ]]; then
    echo "check-layers: src/$layer/ is not in the layer list of $0 (add it where it belongs)" >&2
    status=1
    continue
  fi
done

while IFS= read -r line; do
  file=${line%%:*}
  rest=${line#*:}
  lineno=${rest%%:*}
  target=$(sed -E 's/^[^"]*"([a-z_]+)\/.*/\1/' <<<"${rest#*:}")
  layer=$(cut -d/ -f2 <<<"$file")
  [[ "$target" == "tierkv" ]] && continue
  [[ -z "${rank[$target]+set}" ]] && continue  # e.g. a generated header of the build tree
  if ((rank[$target] > rank[$layer])); then
    echo "check-layers: $file:$lineno: $layer includes $target/ (a layer above it)" >&2
    status=1
  fi
done < <(grep -Hn '^#include "[a-z_]*/' src/*/*.h src/*/*.cc)

while IFS= read -r line; do
  echo "check-layers: ${line%%:*}: a public header includes a private one: ${line#*:*:}" >&2
  status=1
done < <(grep -Hn '^#include "' include/tierkv/*.h | grep -v '#include "tierkv/')

if ((status == 0)); then
  echo "check-layers: OK (${layers[*]})"
fi
exit $status

#!/bin/bash
# Container entrypoint: execs kernelserve-server with the container's arguments, so the server
# is PID 1 and receives SIGTERM itself.
#
# Secrets stay in files: when KERNELSERVE_REDIS_PASSWORD_FILE names a file, each
# "{{REDIS_PASSWORD}}" in the arguments is replaced by that file's first line, e.g.
#   --cache=redis://:{{REDIS_PASSWORD}}@redis:6379/0
set -euo pipefail

if [[ -n "${KERNELSERVE_REDIS_PASSWORD_FILE:-}" ]]; then
  if [[ ! -r "${KERNELSERVE_REDIS_PASSWORD_FILE}" ]]; then
    echo "kernelserve-entrypoint: KERNELSERVE_REDIS_PASSWORD_FILE" \
      "'${KERNELSERVE_REDIS_PASSWORD_FILE}' is not a readable file" >&2
    exit 2
  fi
  password=""
  IFS= read -r password <"${KERNELSERVE_REDIS_PASSWORD_FILE}" || true
  if [[ -z "${password}" ]]; then
    echo "kernelserve-entrypoint: '${KERNELSERVE_REDIS_PASSWORD_FILE}' is empty;" \
      "expected the Redis password on its first line" >&2
    exit 2
  fi
  set -- "${@//"{{REDIS_PASSWORD}}"/"${password}"}"
fi

exec /usr/local/bin/kernelserve-server "$@"

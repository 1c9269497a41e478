#!/usr/bin/env bash
# Two hosts on one machine, for running the lab across hosts without a cluster: two Linux network
# namespaces, each with its own network stack, address and hostname, joined by a veth pair (a
# virtual cable). No default route: traffic goes only between the two. Needs root (ip netns).
#
#   scripts/two_hosts.sh up NAME           hosts NAME-0 (10.238.0.1) and NAME-1 (10.238.0.2)
#   scripts/two_hosts.sh on NAME I CMD...  run CMD on host I (its hostname NAME-I, GLOO over lab0)
#   scripts/two_hosts.sh down NAME         kill every process on the hosts, delete them and the pair
#   scripts/two_hosts.sh demo              up, the comm lab on 2 hosts x 2 ranks, its result, down
#
# The demo is the whole story in one screen: each host starts `a800lab torchrun` (torchrun with
# the lab's checks) with torchrun's c10d rendezvous on host 0 (is_host=1; --local-addr: each agent
# on its own address); together they form one group of 4 ranks on 2 nodes, and rank 0 writes
# every record into one file.
set -euo pipefail

SUBNET=10.238.0          # host I has $SUBNET.(I+1)/24 on its end of the pair
IFACE=lab0               # the pair's end in each host (the same name in both)

ns() { echo "$1-$2"; }   # the namespace of host $2 of $1
addr() { echo "$SUBNET.$(($1 + 1))"; }

up() {
  local name=$1
  [ ${#name} -le 12 ] || { echo "two_hosts: NAME '$name' is longer than 12 characters" >&2; exit 2; }
  ip netns add "$(ns "$name" 0)"
  ip netns add "$(ns "$name" 1)"
  # the pair is made inside host 0 with its other end in host 1: the root namespace never sees it
  ip -n "$(ns "$name" 0)" link add "$IFACE" type veth peer name "$IFACE" netns "$(ns "$name" 1)"
  for i in 0 1; do
    ip -n "$(ns "$name" "$i")" addr add "$(addr "$i")/24" dev "$IFACE"
    ip -n "$(ns "$name" "$i")" link set lo up
    ip -n "$(ns "$name" "$i")" link set "$IFACE" up
  done
}

on() {
  local name=$1 i=$2
  shift 2
  # a UTS namespace gives the host its own hostname (namespaces share the machine's otherwise);
  # GLOO_SOCKET_IFNAME keeps gloo on the pair
  # shellcheck disable=SC2016  # "$0" and "$@" are the inner sh's
  exec ip netns exec "$(ns "$name" "$i")" unshare --uts sh -c 'hostname "$0" && exec "$@"' \
    "$(ns "$name" "$i")" env GLOO_SOCKET_IFNAME="$IFACE" "$@"
}

down() {
  local name=$1 i pids
  for i in 0 1; do
    ip netns list | grep -qw "$(ns "$name" "$i")" || continue
    pids=$(ip netns pids "$(ns "$name" "$i")")
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086  # one pid per word
      kill -KILL $pids 2>/dev/null || true
      for _ in $(seq 50); do   # a namespace lives on while a process holds it: wait (<= 5 s)
        [ -z "$(ip netns pids "$(ns "$name" "$i")")" ] && break
        sleep 0.1
      done
    fi
    ip netns delete "$(ns "$name" "$i")"   # its end of the pair goes with it, and so the pair
  done
}

demo() {
  local out port=29400
  name="demo$$"            # global: the EXIT trap runs after this function has returned
  out=$(mktemp -d)/comm.jsonl
  trap 'down "$name"' EXIT
  up "$name"
  for i in 0 1; do
    "$0" on "$name" "$i" python -m a800lab torchrun --nnodes 2 --nproc-per-node 2 \
      --rdzv-backend c10d --rdzv-endpoint "$(addr 0):$port" --local-addr "$(addr "$i")" \
      --rdzv-conf "is_host=$((i == 0 ? 1 : 0))" \
      comm collectives --op all_reduce hierarchical_all_reduce leader_all_reduce \
      --size 64K 1M --budget-s 0.05 --out "$out" &
  done
  wait
  python - "$out" <<'EOF'
import sys
from a800lab import load_results
from a800lab.core.results import read_records
print("hosts:", read_records(sys.argv[1])[0].env["group"]["hosts"],
      "ranks:", read_records(sys.argv[1])[0].env["group"]["ranks"])
print(load_results(sys.argv[1])[["op", "size_bytes", "world_size", "nodes", "median_ms",
                                 "throughput", "outcome"]].to_string(index=False))
EOF
  echo "records in $out"
}

case "${1:-}" in
  up|down) [ $# -eq 2 ] || { echo "usage: $0 $1 NAME" >&2; exit 2; }; "$1" "$2" ;;
  on) [ $# -ge 4 ] || { echo "usage: $0 on NAME 0|1 CMD..." >&2; exit 2; }; shift; on "$@" ;;
  demo) demo ;;
  *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac

# Sourced by the benchmark scripts: the CPU time of a process from /proc, and the broker's
# pid. Needs KAFKA_BOOTSTRAP_SERVERS (its port names the broker of scripts/kafka.sh).
# cpu_us PID: user + system time so far, in microseconds; sys_us PID: system time only.
# broker_pid: the pid scripts/kafka.sh recorded for that port (fails when it is not alive).
tck=$(getconf CLK_TCK)
cpu_us() { awk -v t="$tck" '{ printf "%d\n", ($14 + $15) * 1000000 / t }' "/proc/$1/stat"; }
sys_us() { awk -v t="$tck" '{ printf "%d\n", $15 * 1000000 / t }' "/proc/$1/stat"; }
broker_pid() {
  local port=${KAFKA_BOOTSTRAP_SERVERS##*:} pid
  pid=$(cat "build/kafka/run-$port/kafka.pid" 2>/dev/null || true)
  if [ -z "$pid" ] || [ ! -r "/proc/$pid/stat" ]; then
    echo "no live broker pid in build/kafka/run-$port/kafka.pid (scripts/kafka.sh start $port)" >&2
    return 1
  fi
  echo "$pid"
}
# jit_us PID: user + system time so far of a JVM's JIT compiler threads (C1, C2). A broker
# still compiles minutes after its start (each round of a benchmark reaches code it had not
# run often enough yet): its compilers' time is a warm-up cost, not the work per request.
jit_us() {
  local sum=0 f s
  for f in /proc/"$1"/task/*/stat; do
    s=$(cat "$f" 2>/dev/null) || continue
    case ${s#*(} in "C1 Compiler"* | "C2 Compiler"*) ;; *) continue ;; esac
    # shellcheck disable=SC2086 # the fields after the name, split on purpose
    set -- ${s##*) }
    sum=$((sum + ${12} + ${13}))
  done
  echo $((sum * 1000000 / tck))
}

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

# Sourced by the sizing scripts: a process's memory from /proc.
# kb PID VmHWM|VmRSS: that line of /proc/PID/status, in KB.
# sample PID FILE: appends "time VmRSS VmHWM load1 load5 load15" every 0.5 s while PID
#   lives; a process above MAX_RSS_MB (env, default 12000) is killed and the line says so.
kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
sample() {
  local pid=$1 file=$2 rss hwm
  while [ -r "/proc/$pid/status" ]; do
    rss=$(kb "$pid" VmRSS 2>/dev/null) hwm=$(kb "$pid" VmHWM 2>/dev/null) || break
    [ -n "$rss" ] || break
    echo "$(date +%s.%N) $rss $hwm $(cut -d' ' -f1-3 /proc/loadavg)" >>"$file"
    if [ "$rss" -gt $((${MAX_RSS_MB:-12000} * 1024)) ]; then
      echo "RSS $rss KB above MAX_RSS_MB=${MAX_RSS_MB:-12000}: killing $pid" >>"$file"
      kill -KILL "$pid"
      break
    fi
    sleep 0.5
  done
}

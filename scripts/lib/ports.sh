# Sourced by the benchmark scripts: free loopback ports.
# port_open PORT: something listens on 127.0.0.1:PORT.
# free_port FROM STEP: the first P from FROM (in steps of STEP) with P .. P+STEP-1 all free.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p=$1 i busy
  while :; do
    busy=0
    for ((i = 0; i < $2; i++)); do port_open $((p + i)) && busy=1; done
    ((busy)) || break
    p=$((p + $2))
  done
  echo "$p"
}

# Sourced by the benches that put bench/delay_link between cuwire's client and server (distance.sh,
# cpu_distance.sh, link_rate.sh).
start_link() {  # start_link BINARY TARGET_PORT DELAY_US RATE_MBIT LOG: a forwarder to 127.0.0.1:TARGET_PORT
  # (RATE_MBIT 0: bandwidth not limited), its output in LOG; sets LINK (its pid) and AT (its port)
  "$1" 0 "$2" "$3" "$4" >"$5" 2>&1 & LINK=$!
  for _ in $(seq 50); do grep -q "listening on" "$5" && break; sleep 0.1; done
  AT=$(grep -oP 'listening on \K[0-9]+' "$5")
}

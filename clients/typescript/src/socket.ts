/**
 * The sockets kafkajs connects with: its own defaults (TLS when `ssl` is set, keep-alive)
 * plus `setNoDelay`. kafkajs leaves Nagle's algorithm on, so a small request written right
 * after another could wait for the broker's delayed ACK: healthy calls had a tail at 40 ms
 * (Linux's delayed-ACK timer) on the low-latency path (docs/benchmarks.md, "The first call
 * and the tail"). Passing your own `kafka.socketFactory` replaces this one.
 */
import net from "node:net";
import tls from "node:tls";
import type { ISocketFactory } from "kafkajs";

const KEEP_ALIVE_MS = 60_000;

export const noDelaySocketFactory: ISocketFactory = ({ host, port, ssl, onConnect }) => {
  const socket = ssl
    ? tls.connect({ host, port, ...(net.isIP(host) ? {} : { servername: host }), ...(ssl as tls.ConnectionOptions) }, onConnect)
    : net.connect({ host, port }, onConnect);
  socket.setKeepAlive(true, KEEP_ALIVE_MS);
  socket.setNoDelay(true);
  return socket;
};

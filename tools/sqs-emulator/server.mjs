// Starts fauxqs (the SQS emulator durachk's CI runs against) on 127.0.0.1 only,
// on the port in FAUXQS_PORT. fauxqs's own CLI listens on 0.0.0.0; this launcher
// builds the same app with fauxqs's exported buildApp and binds it to loopback.
// Every response carries "Server: fauxqs/<version>", so that a durachk verdict
// can name the emulator version it was measured on.
import { readFileSync } from "node:fs";
import { buildApp } from "fauxqs";

const pkg = JSON.parse(readFileSync(new URL("./node_modules/fauxqs/package.json", import.meta.url), "utf8"));
const port = Number.parseInt(process.env.FAUXQS_PORT ?? "", 10);
if (!Number.isInteger(port) || port <= 0) {
  console.error("server.mjs: set FAUXQS_PORT to a free port");
  process.exit(2);
}
const app = buildApp({
  logger: process.env.FAUXQS_LOGGER === "true",
  defaultRegion: process.env.FAUXQS_DEFAULT_REGION,
});
app.addHook("onSend", (_req, reply, _payload, done) => {
  reply.header("server", `fauxqs/${pkg.version}`);
  done();
});
const stop = async () => {
  await app.close();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
await app.listen({ port, host: "127.0.0.1" });
console.log(`fauxqs ${pkg.version} on node ${process.version} listening on http://127.0.0.1:${port}`);

// Relay's Node bootstrap, copied into every node function image.
//
// One-shot (the default): runs the handler named by RELAY_HANDLER
// ("lib.jobs.handler": module lib/jobs, function handler) on the event JSON
// read from stdin. The module is found on the filesystem (lib/jobs.js, .mjs,
// then .cjs, below the working directory) and then imported, so ESM and
// CommonJS both work. A returned promise is awaited. Exit status 0 means
// success; an exception prints its stack on stderr and exits 1.
//
// Warm (--warm, started as `sh -c 'exec node ... --warm 3<&0 </dev/null'` so
// the handler's own stdin is /dev/null): stays resident and serves one
// invocation at a time, reading requests from fd 3:
//
//     invoke <seq> <nonce> <handler> <m> <n>\n<m bytes of context JSON><n bytes of event JSON>
//
// The context is a JSON object of RELAY_* variables (RELAY_MESSAGE_ID,
// RELAY_ATTEMPT, ...): they are in process.env, with RELAY_HANDLER, while the
// handler runs, and deleted when it settles, so no invocation sees another's.
// The handler runs as in one-shot mode (each module imported once); then a
// marker line goes to each stream, "\x1e\x1frelay:end <seq> <nonce>" on stderr
// and "\x1e\x1frelay:done <seq> <nonce> ok|error" on stdout, after everything
// the handler wrote there. The nonce is Relay's random token for this request
// alone: it stays in this loop's locals, never in process.env, so a handler
// that prints a marker (event text echoed, say) cannot end its invocation
// with it. "\x1e\x1frelay:ready 3" on stdout says it is listening. A handler
// that exits the process ends the container; Relay replaces it.
import { statSync } from "node:fs";
import { Socket } from "node:net";
import path from "node:path";
import { pathToFileURL } from "node:url";

const EXTENSIONS = [".js", ".mjs", ".cjs"];

class BootstrapError extends Error {}

function isFile(candidate) {
  try {
    return statSync(candidate).isFile();
  } catch {
    return false;
  }
}

function locate(root, moduleName) {
  const base = path.join(root, ...moduleName.split("."));
  const candidates = EXTENSIONS.map((extension) => base + extension);
  const found = candidates.find(isFile);
  if (!found) {
    throw new BootstrapError(`no module ${moduleName}: none of ${candidates.join(", ")} exists`);
  }
  return found;
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

function split(spec, what) {
  const dot = spec.lastIndexOf(".");
  if (dot <= 0 || dot === spec.length - 1) {
    throw new BootstrapError(`${what} is not of the form module.function`);
  }
  return [spec.slice(0, dot), spec.slice(dot + 1)];
}

async function load(moduleName, functionName) {
  const file = locate(process.cwd(), moduleName);
  const namespace = await import(pathToFileURL(file).href);
  let handler = namespace[functionName];
  if (typeof handler !== "function" && namespace.default != null) {
    handler = namespace.default[functionName]; // CommonJS: module.exports = { handler }
  }
  if (typeof handler !== "function") {
    throw new BootstrapError(`${path.relative(process.cwd(), file)} exports no function ${functionName}`);
  }
  return handler;
}

function parse(text) {
  return text.trim() === "" ? null : JSON.parse(text);
}

function describe(error) {
  return error instanceof BootstrapError ? `relay: ${error.message}` : (error?.stack ?? String(error));
}

async function main() {
  const spec = process.env.RELAY_HANDLER ?? "";
  const [moduleName, functionName] = split(spec, `RELAY_HANDLER=${JSON.stringify(spec)}`);
  locate(process.cwd(), moduleName);
  const event = parse(await readStdin());
  const handler = await load(moduleName, functionName);
  await handler(event);
}

const MARKER = "\x1e\x1frelay:";

function mark(stream, text) {
  return new Promise((resolve) => stream.write(MARKER + text, () => resolve()));
}

async function serve() {
  const handlers = new Map(); // handler spec -> function: each module is imported once
  const invoke = async (spec, text) => {
    if (!handlers.has(spec)) handlers.set(spec, await load(...split(spec, `handler ${JSON.stringify(spec)}`)));
    await handlers.get(spec)(parse(text));
  };
  let buffer = Buffer.alloc(0);
  await mark(process.stdout, "ready 3\n");
  // A socket, not fs.createReadStream: its blocking reads on a pipe would hold process.exit() forever.
  for await (const chunk of new Socket({ fd: 3, readable: true, writable: false })) {
    buffer = Buffer.concat([buffer, chunk]);
    for (;;) {
      const newline = buffer.indexOf(10);
      if (newline < 0) {
        if (buffer.length > 512) throw new BootstrapError("not a request: a header longer than 512 bytes");
        break;
      }
      const words = buffer.subarray(0, newline).toString("latin1").split(" ");
      if (words.length !== 6 || words[0] !== "invoke" || !/^[0-9]+$/.test(words[4]) || !/^[0-9]+$/.test(words[5])) {
        throw new BootstrapError(`not a request: ${JSON.stringify(words.join(" ").slice(0, 100))}`);
      }
      const [, seq, nonce, spec, contextLength, eventLength] = words;
      const start = newline + 1 + Number(contextLength);
      const end = start + Number(eventLength);
      if (buffer.length < end) break;
      const variables = JSON.parse(buffer.subarray(newline + 1, start).toString("utf8"));
      const text = buffer.subarray(start, end).toString("utf8");
      buffer = buffer.subarray(end);
      process.env.RELAY_HANDLER = spec;
      Object.assign(process.env, variables);
      let ok = true;
      try {
        await invoke(spec, text);
      } catch (error) {
        process.stderr.write(`${describe(error)}\n`);
        ok = false;
      } finally {
        for (const name of Object.keys(variables)) delete process.env[name];
      }
      await mark(process.stderr, `end ${seq} ${nonce}\n`);
      await mark(process.stdout, `done ${seq} ${nonce} ${ok ? "ok" : "error"}\n`);
    }
  }
}

const warm = process.argv[2] === "--warm";
(warm ? serve() : main()).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${describe(error)}\n`);
    process.exit(warm ? 2 : 1);
  },
);

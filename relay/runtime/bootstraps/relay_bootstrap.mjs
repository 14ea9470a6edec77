// Relay's Node bootstrap, copied into every node function image.
//
// Runs the handler named by RELAY_HANDLER ("lib.jobs.handler": module lib/jobs,
// function handler) on the event JSON read from stdin. The module is found on
// the filesystem (lib/jobs.js, .mjs, then .cjs, below the working directory)
// and then imported, so ESM and CommonJS both work. A returned promise is
// awaited. Exit status 0 means success; an exception prints its stack on
// stderr and exits 1.
import { statSync } from "node:fs";
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

async function main() {
  const spec = process.env.RELAY_HANDLER ?? "";
  const dot = spec.lastIndexOf(".");
  if (dot <= 0 || dot === spec.length - 1) {
    throw new BootstrapError(`RELAY_HANDLER=${JSON.stringify(spec)} is not of the form module.function`);
  }
  const moduleName = spec.slice(0, dot);
  const functionName = spec.slice(dot + 1);
  const file = locate(process.cwd(), moduleName);
  const text = await readStdin();
  const event = text.trim() === "" ? null : JSON.parse(text);
  const namespace = await import(pathToFileURL(file).href);
  let handler = namespace[functionName];
  if (typeof handler !== "function" && namespace.default != null) {
    handler = namespace.default[functionName]; // CommonJS: module.exports = { handler }
  }
  if (typeof handler !== "function") {
    throw new BootstrapError(`${path.relative(process.cwd(), file)} exports no function ${functionName}`);
  }
  await handler(event);
}

main().then(
  () => process.exit(0),
  (error) => {
    const text = error instanceof BootstrapError ? `relay: ${error.message}` : (error?.stack ?? String(error));
    process.stderr.write(`${text}\n`);
    process.exit(1);
  },
);

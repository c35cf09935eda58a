// Drive a running memory-server with the MCP TypeScript SDKs, as the Inspector and desktop clients do.
//
// Reads a plan from stdin:
//   {"url": "http://127.0.0.1:P/mcp",
//    "sessions": [{"name": "basic", "authorization": "Basic ...",
//                  "calls": [{"tool": "recall_memory", "arguments": {...}}, ...]}, ...]}
// An argument value {"$from": N, "field": "reference"} stands for that field of the structured content
// of call N of the same session (e.g. forget the reference that an earlier remember returned).
// and, for each SDK (`sdk1`: @modelcontextprotocol/sdk 1.x, `client2`: @modelcontextprotocol/client 2.x),
// connects once per session, lists the tools (so the SDK caches and applies their output schemas, as real
// clients do), makes every call and writes one JSON document to stdout:
//   {"sdk1": {"version": "<SDK version>", "sessions": {"basic": {"serverInfo": {...}, "instructions": "...",
//            "tools": [...], "calls": [{"isError": bool, "text": "...", "hasStructuredContent": bool,
//                                       "structuredContent": ...} | {"thrown": "<message>"}]}}},
//    "client2": {...}}
// A call the SDK itself rejects (a schema mismatch, a protocol error) is recorded as `thrown`.

import { readFileSync } from "node:fs";

import { Client as Client1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as Transport1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Client as Client2, StreamableHTTPClientTransport as Transport2 } from "@modelcontextprotocol/client";

const SDKS = {
  sdk1: { Client: Client1, Transport: Transport1, pkg: "@modelcontextprotocol/sdk" },
  client2: { Client: Client2, Transport: Transport2, pkg: "@modelcontextprotocol/client" },
};

function packageVersion(name) {
  // Read next to this file: the SDKs' exports maps do not all expose package.json.
  return JSON.parse(readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url), "utf8")).version;
}

function resolve(args, calls) {
  const out = {};
  for (const [key, value] of Object.entries(args ?? {})) {
    const from = value !== null && typeof value === "object" && "$from" in value ? calls[value.$from] : undefined;
    out[key] = from === undefined ? value : (from.structuredContent ?? {})[value.field];
  }
  return out;
}

async function runSession(sdk, url, session) {
  const headers = session.authorization ? { Authorization: session.authorization } : {};
  const transport = new sdk.Transport(new URL(url), { requestInit: { headers } });
  const client = new sdk.Client({ name: "memory-server-tests", version: "1.0.0" });
  await client.connect(transport);
  const out = {
    serverInfo: client.getServerVersion(),
    instructions: client.getInstructions ? client.getInstructions() ?? null : null,
    tools: (await client.listTools()).tools,
    calls: [],
  };
  for (const call of session.calls) {
    try {
      const result = await client.callTool({ name: call.tool, arguments: resolve(call.arguments, out.calls) });
      out.calls.push({
        isError: result.isError === true,
        text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n"),
        hasStructuredContent: result.structuredContent !== undefined,
        structuredContent: result.structuredContent ?? null,
      });
    } catch (error) {
      out.calls.push({ thrown: String(error && error.message ? error.message : error) });
    }
  }
  await client.close();
  return out;
}

async function main() {
  const plan = JSON.parse(readFileSync(0, "utf8"));
  const result = {};
  for (const [key, sdk] of Object.entries(SDKS)) {
    const sessions = {};
    for (const session of plan.sessions) {
      sessions[session.name] = await runSession(sdk, plan.url, session);
    }
    result[key] = { version: packageVersion(sdk.pkg), sessions };
  }
  process.stdout.write(JSON.stringify(result));
}

main().catch((error) => {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});

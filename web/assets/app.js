// The evals.si viewer: one script renders every page from the JSON API.
// Plain DOM, no framework, no build step. Text from runs (agent output, tool
// output, diffs) is only ever set as text, never parsed as HTML.
'use strict';

const app = document.getElementById('app');
const POLL_MS = 2000;
let pollTimer = null;

// el builds an element: el('a', {href: '/'}, 'text', child, [more]).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat(Infinity)) {
    if (k == null || k === false) continue;
    e.append(k instanceof Node ? k : String(k));
  }
  return e;
}

async function api(path) {
  const r = await fetch(path, {headers: {Accept: 'application/json'}});
  const body = await r.json().catch(() => ({error: r.status + ' ' + r.statusText}));
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

const fmt = {
  score: v => v == null ? '–' : Number.isInteger(v) ? String(v) : v.toFixed(3),
  delta: v => v == null ? '–' : (v > 0 ? '+' : v < 0 ? '−' : '±') + Math.abs(v).toFixed(3),
  usd: v => '$' + (v || 0).toFixed(4),
  time: s => s ? new Date(s).toLocaleString() : '–',
  dur: ms => ms == null ? '–' : ms < 1000 ? ms + ' ms' : ms < 120000 ? (ms / 1000).toFixed(1) + ' s' : (ms / 60000).toFixed(1) + ' min',
  int: n => (n || 0).toLocaleString(),
};

const status = s => el('span', {class: 'status st-' + s}, s);
const verdict = v => el('span', {class: 'badge v-' + v}, v);
const passBadge = p => p == null ? el('span', {class: 'muted'}, '–') : el('span', {class: 'badge ' + (p ? 'pass' : 'fail')}, p ? 'pass' : 'fail');
const runLink = r => el('a', {href: '/runs/' + encodeURIComponent(r.id)}, r.id);
const trialHref = id => '/trials/' + encodeURIComponent(id);
const stat = (k, v, id) => el('div', {class: 'stat', id}, el('div', {class: 'k'}, k), el('div', {class: 'v'}, v));
const pretty = raw => { try { return JSON.stringify(typeof raw === 'string' ? JSON.parse(raw) : raw, null, 2); } catch { return String(raw); } };

function crumbs(...items) {
  const nav = document.getElementById('crumbs');
  nav.replaceChildren();
  items.forEach((it, i) => {
    if (i) nav.append(el('span', {class: 'sep'}, '›'));
    nav.append(it);
  });
}

function setLive(on) { document.getElementById('live').hidden = !on; }

function poll(fn) {
  clearTimeout(pollTimer);
  pollTimer = setTimeout(async () => {
    try { await fn(); } catch (e) { console.error(e); poll(fn); }
  }, POLL_MS);
}

// put replaces the page's content; null and false children are skipped.
function put(...kids) { app.replaceChildren(...kids.flat(Infinity).filter(k => k != null && k !== false)); }

function showError(e) {
  put(el('div', {class: 'error-box', id: 'error'}, e.message));
}

// keepOpen re-renders a page without closing the <details> the reader opened.
function keepOpen(render) {
  const open = new Set([...app.querySelectorAll('details[id]')].filter(d => d.open).map(d => d.id));
  render();
  for (const id of open) { const d = document.getElementById(id); if (d) d.open = true; }
}

function scoreChips(scores) {
  return (scores || []).map(s => el('span', {class: 'chip', title: s.name}, s.name + '=' + fmt.score(s.value)));
}

// ---- runs -----------------------------------------------------------------

async function pageRuns() {
  document.title = 'Runs · evals.si';
  crumbs(el('span', null, 'Runs'));
  const state = {sort: 'created_at', dir: -1, name: '', status: '', picked: []};
  const nameIn = el('input', {type: 'search', id: 'filter-name', placeholder: 'Filter by name…'});
  const statusIn = el('select', {id: 'filter-status'}, ['', 'running', 'completed', 'interrupted', 'failed', 'cancelled'].map(s => el('option', {value: s}, s || 'any status')));
  const cmpBtn = el('button', {id: 'compare-picked', disabled: true}, 'Compare selected');
  const table = el('div');
  put(el('h1', null, 'Runs'),
    el('div', {class: 'toolbar'}, nameIn, statusIn, el('span', {class: 'muted', id: 'pick-hint'}, 'Tick two runs to compare them (first ticked is the base).'), el('span', {class: 'right'}, cmpBtn)),
    table);
  let runs = [];
  const cols = [
    ['', null], ['Run', 'id'], ['Name', 'name'], ['Status', 'status'], ['Created', 'created_at'],
    ['Trials', 'trials'], ['Errored', 'errored'], ['Scores', null], ['Spend', 'cost_usd'],
  ];
  const render = () => {
    const q = state.name.toLowerCase();
    const rows = runs.filter(r => (!q || r.name.toLowerCase().includes(q) || r.id.includes(q)) && (!state.status || r.status === state.status));
    rows.sort((a, b) => {
      const x = a[state.sort], y = b[state.sort];
      return (x < y ? -1 : x > y ? 1 : 0) * state.dir;
    });
    cmpBtn.disabled = state.picked.length !== 2;
    const head = el('tr', null, cols.map(([label, key]) => el('th', {
      class: key ? 'sortable' : null, 'data-sort': key,
      onclick: key ? () => { state.dir = state.sort === key ? -state.dir : 1; state.sort = key; render(); } : null,
    }, label, key === state.sort ? (state.dir > 0 ? ' ▲' : ' ▼') : '')));
    const body = rows.map(r => el('tr', {'data-run': r.id, 'data-name': r.name},
      el('td', null, el('input', {type: 'checkbox', class: 'pick', 'data-run': r.id, checked: state.picked.includes(r.id), onchange: e => {
        state.picked = state.picked.filter(id => id !== r.id);
        if (e.target.checked) state.picked.push(r.id);
        if (state.picked.length > 2) state.picked.shift();
        render();
      }})),
      el('td', {class: 'mono'}, runLink(r)),
      el('td', null, el('a', {href: '/runs/' + encodeURIComponent(r.id), class: 'run-name'}, r.name)),
      el('td', null, status(r.status)),
      el('td', {class: 'nowrap'}, fmt.time(r.created_at)),
      el('td', {class: 'num'}, r.status === 'running' ? r.done + '/' + r.trials : r.trials),
      el('td', {class: 'num'}, r.errored || ''),
      el('td', null, Object.entries(r.scores || {}).sort().map(([k, v]) => el('span', {class: 'chip'}, k + '=' + fmt.score(v)))),
      el('td', {class: 'num'}, fmt.usd(r.cost_usd)),
    ));
    table.replaceChildren(rows.length ? el('table', {id: 'runs'}, el('thead', null, head), el('tbody', null, body))
      : el('p', {class: 'empty'}, runs.length ? 'No run matches the filter.' : 'No runs yet. Run `evalsi run -f SPEC` first.'));
  };
  nameIn.addEventListener('input', () => { state.name = nameIn.value; render(); });
  statusIn.addEventListener('change', () => { state.status = statusIn.value; render(); });
  cmpBtn.addEventListener('click', () => {
    const [base, head] = state.picked;
    location.href = '/compare?base=' + encodeURIComponent(base) + '&head=' + encodeURIComponent(head);
  });
  const load = async () => {
    runs = (await api('/api/runs')).runs;
    render();
    const live = runs.some(r => r.status === 'running');
    setLive(live);
    if (live) poll(load);
  };
  await load();
}

// ---- run ------------------------------------------------------------------

async function pageRun(id) {
  const [d, list] = await Promise.all([api('/api/runs/' + encodeURIComponent(id)), api('/api/runs')]);
  let data = d;
  const render = () => keepOpen(() => renderRun(data, list.runs));
  render();
  const tick = async () => {
    data = await api('/api/runs/' + encodeURIComponent(id));
    render();
    setLive(data.run.status === 'running');
    if (data.run.status === 'running') poll(tick);
  };
  setLive(data.run.status === 'running');
  if (data.run.status === 'running') poll(tick);
}

function renderRun(d, allRuns) {
  const r = d.run;
  document.title = r.name + ' · evals.si';
  crumbs(el('a', {href: '/'}, 'Runs'), el('span', null, r.name));
  const trials = d.records.flatMap(rec => rec.trials);
  const passing = trials.filter(t => t.passed === true).length;

  const others = allRuns.filter(o => o.id !== r.id);
  // Runs of the same name first: comparing a spec with its previous run is
  // the common case.
  others.sort((a, b) => (b.name === r.name) - (a.name === r.name));
  const pick = el('select', {id: 'compare-with'}, others.map(o => el('option', {value: o.id}, o.name + ' — ' + o.id)));
  const compare = !others.length ? el('p', {class: 'muted'}, 'No other run to compare with yet.') : el('div', {class: 'toolbar'}, el('span', {class: 'muted'}, 'Compare this run (base) with'), pick,
    el('button', {id: 'compare-go', disabled: !others.length, onclick: () => {
      location.href = '/compare?base=' + encodeURIComponent(r.id) + '&head=' + encodeURIComponent(pick.value);
    }}, 'Compare'));

  const evalRows = d.evaluators.flatMap(e => e.scores.length
    ? e.scores.map((s, i) => el('tr', null, el('td', null, i ? '' : e.name), el('td', null, s.name), el('td', {class: 'num'}, fmt.score(s.mean)), el('td', {class: 'num'}, s.n), el('td', {class: 'num'}, i ? '' : e.errored || '')))
    : [el('tr', null, el('td', null, e.name), el('td', {class: 'muted'}, '–'), el('td'), el('td', {class: 'num'}, 0), el('td', {class: 'num'}, e.errored || ''))]);
  const passRows = (d.pass_at_k || []).map(p => el('tr', null, el('td', null, p.kind), el('td', null, p.kind.replace('k', p.k)), el('td', {class: 'num'}, fmt.score(p.value)), el('td', {class: 'num'}, p.records), el('td')));

  const trialRows = d.records.flatMap(rec => rec.trials.map((t, i) => el('tr', {'data-trial': t.id},
    i ? null : el('td', {rowspan: rec.trials.length, class: 'mono nowrap'}, rec.record_id),
    el('td', {class: 'nowrap'}, el('a', {href: trialHref(t.id), class: 'trial-link'}, 'trial ' + t.trial), t.attempt > 1 ? el('span', {class: 'muted'}, ' (attempt ' + t.attempt + ')') : ''),
    el('td', null, status(t.status)),
    el('td', null, passBadge(t.passed)),
    el('td', null, scoreChips(t.scores)),
    el('td', {class: 'num'}, fmt.int(t.usage.input_tokens + t.usage.output_tokens)),
    el('td', {class: 'num'}, fmt.usd(t.cost_usd)),
    el('td', {class: 'num'}, fmt.dur(t.duration_ms)),
    el('td', {class: 'muted'}, t.error ? (t.error_kind + ': ' + t.error).slice(0, 160) : ''),
  )));

  const isoRows = d.isolation.map(g => {
    const rep = typeof g.report === 'object' ? g.report : {};
    return el('tr', null, el('td', null, rep.rung || '–'), el('td', null, rep.isolation || '–'), el('td', null, rep.network || '–'),
      el('td', null, (rep.limits || []).map(l => el('span', {class: 'chip'}, l))), el('td', {class: 'muted'}, (rep.notes || []).join('; ')), el('td', {class: 'num'}, g.trials));
  });

  put(
    el('h1', null, r.name, status(r.status)),
    el('div', {class: 'sub mono'}, r.id, r.spec_path ? ' · ' + r.spec_path : '', ' · started ', fmt.time(r.created_at), r.finished_at ? ' · finished ' + fmt.time(r.finished_at) : ''),
    r.error ? el('div', {class: 'error-box'}, r.error) : null,
    el('div', {class: 'stats', id: 'run-stats'},
      stat('Records', r.records), stat('Trials done', r.done + '/' + r.trials, 'stat-done'), stat('Passing', passing),
      stat('Errored', r.errored), stat('Spend', fmt.usd(r.cost_usd)), stat('Tokens', fmt.int(r.tokens)), stat('Elapsed', fmt.dur(Math.round(d.elapsed_seconds * 1000)))),
    compare,
    el('h2', null, 'Scores by evaluator'),
    evalRows.length || passRows.length
      ? el('table', {id: 'scores'}, el('thead', null, el('tr', null, ['Evaluator', 'Score', 'Mean', 'Scored', 'Errored'].map((h, i) => el('th', {class: i > 1 ? 'num' : null}, h)))), el('tbody', null, evalRows, passRows))
      : el('p', {class: 'empty'}, 'No scores yet.'),
    el('h2', null, 'Records and trials'),
    trialRows.length
      ? el('table', {id: 'trials'}, el('thead', null, el('tr', null, ['Record', 'Trial', 'Status', 'Checker', 'Scores', 'Tokens', 'Spend', 'Time', 'Error'].map(h => el('th', {class: ['Tokens', 'Spend', 'Time'].includes(h) ? 'num' : null}, h)))), el('tbody', null, trialRows))
      : el('p', {class: 'empty'}, 'No trials yet.'),
    el('h2', null, 'Errors by kind'),
    d.errors.length ? el('div', {id: 'errors'}, d.errors.map(g => el('details', {id: 'err-' + g.kind, class: 'card', open: true},
      el('summary', null, el('span', {class: 'badge fail'}, g.kind), ' ', g.count + ' trial' + (g.count > 1 ? 's' : '')),
      el('ul', null, g.trials.map(t => el('li', null, el('a', {href: trialHref(t.trial_id)}, t.record_id + ' #' + t.trial), ': ', el('span', {class: 'mono'}, t.error.slice(0, 400))))))))
      : el('p', {class: 'empty', id: 'errors'}, 'No errored trials.'),
    el('h2', null, 'Isolation'),
    isoRows.length ? el('table', {id: 'isolation'}, el('thead', null, el('tr', null, ['Rung', 'Isolation', 'Network', 'Limits', 'Notes', 'Trials'].map(h => el('th', null, h)))), el('tbody', null, isoRows))
      : el('p', {class: 'empty'}, 'No isolation report (plain model runs use no sandbox).'),
    el('h2', null, 'Spec'),
    el('details', {id: 'spec', class: 'card'}, el('summary', null, 'Show the run spec as it was run'), el('pre', null, pretty(d.spec))),
  );
}

// ---- trial ----------------------------------------------------------------

async function pageTrial(id) {
  let d = await api('/api/trials/' + encodeURIComponent(id));
  const tl = el('div', {class: 'timeline', id: 'timeline'});
  const sentinel = el('div', {class: 'sentinel', id: 'more'});
  const state = {next: 0, more: true, loading: false, shown: 0, t0: null};
  renderTrial(d, tl, sentinel);

  const loadPage = async () => {
    if (state.loading || !state.more) return;
    state.loading = true;
    try {
      const p = await api('/api/trials/' + encodeURIComponent(d.trial.id) + '/events?after=' + state.next + '&limit=500');
      if (state.t0 == null && p.events.length) state.t0 = new Date(p.events[0].time).getTime();
      const frag = document.createDocumentFragment();
      for (const e of p.events) frag.append(renderEvent(e, state.t0));
      tl.append(frag);
      state.shown += p.events.length;
      state.next = p.next;
      state.more = p.more;
    } finally {
      state.loading = false;
    }
    sentinel.textContent = state.more ? 'Loading more… (' + fmt.int(state.shown) + ' of ' + fmt.int(d.events) + ')' : fmt.int(state.shown) + ' events';
    // Keep filling while the sentinel is still on screen.
    if (state.more && sentinel.getBoundingClientRect().top < innerHeight + 800) await loadPage();
  };
  new IntersectionObserver(es => { if (es.some(e => e.isIntersecting)) loadPage(); }, {rootMargin: '800px'}).observe(sentinel);
  await loadPage();

  const live = () => d.trial.status === 'running' || d.trial.status === 'pending';
  const tick = async () => {
    d = await api('/api/trials/' + encodeURIComponent(id));
    // Only new events are fetched; the page stays where the reader is.
    state.more = true;
    await loadPage();
    const head = document.getElementById('trial-head');
    if (head) head.replaceWith(trialHead(d));
    setLive(live());
    if (live()) poll(tick); else renderTrial(d, tl, sentinel);
  };
  setLive(live());
  if (live()) poll(tick);
}

function trialHead(d) {
  const t = d.trial;
  return el('div', {id: 'trial-head'},
    el('h1', null, t.record_id, el('span', {class: 'muted'}, '· trial ' + t.trial), status(t.status), passBadge(t.passed)),
    el('div', {class: 'sub mono'}, t.id, ' · attempt ', t.attempt, ' · run ', el('a', {href: '/runs/' + encodeURIComponent(d.run.id), id: 'run-link'}, d.run.name), t.started_at ? ' · started ' + fmt.time(t.started_at) : ''),
    t.error ? el('div', {class: 'error-box'}, el('b', null, t.error_kind + ': '), t.error) : null,
    el('div', {class: 'stats'},
      stat('Input tokens', fmt.int(t.usage.input_tokens)), stat('Output tokens', fmt.int(t.usage.output_tokens)),
      stat('Spend', fmt.usd(t.cost_usd)), stat('Duration', fmt.dur(t.duration_ms)), stat('Events', fmt.int(d.events), 'stat-events')),
  );
}

function renderTrial(d, tl, sentinel) {
  const t = d.trial;
  document.title = t.record_id + ' #' + t.trial + ' · evals.si';
  crumbs(el('a', {href: '/'}, 'Runs'), el('a', {href: '/runs/' + encodeURIComponent(d.run.id)}, d.run.name), el('span', null, t.record_id + ' #' + t.trial));
  const c = d.checker;
  const scores = t.scores.length
    ? el('table', {id: 'trial-scores'}, el('thead', null, el('tr', null, el('th', null, 'Score'), el('th', {class: 'num'}, 'Value'), el('th', null, 'Details'))),
      el('tbody', null, t.scores.map(s => el('tr', null, el('td', null, s.name), el('td', {class: 'num'}, fmt.score(s.value)),
        el('td', null, s.details ? el('details', {id: 'sd-' + s.name}, el('summary', null, 'details'), el('pre', null, pretty(s.details))) : '')))))
    : el('p', {class: 'empty'}, 'No scores.');
  const checker = c
    ? el('div', {class: 'card', id: 'checker'},
      el('div', {class: 'meta'}, passBadge(c.pass), ' exit ', c.exit_code, ' · score ', fmt.score(c.score), c.command ? el('span', {class: 'mono muted'}, ' · ', c.command.join(' ')) : ''),
      c.details ? el('div', {class: 'muted'}, c.details) : '',
      el('pre', null, c.output || '(no output)'))
    : el('p', {class: 'empty', id: 'checker'}, 'No checker ran.');
  put(
    trialHead(d),
    el('div', {class: 'grid2'},
      el('div', null, el('h2', null, 'Scores'), scores),
      el('div', null, el('h2', null, 'Checker'), checker)),
    el('h2', null, 'Diff', d.diff_truncated ? el('span', {class: 'muted'}, ' (first 1 MiB; ', el('a', {href: '/api/trials/' + encodeURIComponent(t.id) + '/artifacts/diff.patch'}, 'whole diff'), ')') : ''),
    d.diff ? renderDiff(d.diff) : el('p', {class: 'empty', id: 'diff'}, 'No changes.'),
    el('div', {class: 'grid2'},
      el('details', {id: 'record', class: 'card'}, el('summary', null, 'Record (input)'), el('pre', null, pretty(d.record))),
      el('details', {id: 'output', class: 'card'}, el('summary', null, 'Final output'), el('pre', null, d.output || '(none)'))),
    d.artifacts.length ? el('p', {class: 'muted'}, 'Artifacts: ', d.artifacts.map(a => el('a', {class: 'chip', href: '/api/trials/' + encodeURIComponent(t.id) + '/artifacts/' + encodeURIComponent(a.name)}, a.name + ' (' + fmt.int(a.size) + ' B)'))) : '',
    el('h2', null, 'Trajectory'),
    tl, sentinel,
  );
}

function renderDiff(text) {
  const pre = el('pre', {class: 'diff', id: 'diff'});
  for (const line of text.split('\n')) {
    let cls = null;
    if (line.startsWith('+++') || line.startsWith('---') || line.startsWith('diff ') || line.startsWith('index ')) cls = 'meta';
    else if (line.startsWith('+')) cls = 'add';
    else if (line.startsWith('-')) cls = 'del';
    else if (line.startsWith('@@')) cls = 'hunk';
    pre.append(cls ? el('span', {class: cls}, line) : line + '\n');
  }
  return pre;
}

// long folds text over a few lines into a <details>, so 100-KB tool outputs
// do not flood the timeline.
function long(text, id) {
  text = text || '';
  const lines = text.split('\n');
  if (lines.length <= 12 && text.length <= 1500) return el('pre', null, text);
  return el('details', {id}, el('summary', null, lines.length + ' lines, ' + fmt.int(text.length) + ' chars'), el('pre', null, text));
}

function renderEvent(e, t0) {
  const off = t0 == null ? '' : '+' + fmt.dur(new Date(e.time).getTime() - t0);
  const meta = [];
  let body;
  let cls = 'ev k-' + e.kind;
  switch (e.kind) {
    case 'message': {
      const m = e.message;
      body = [el('div', {class: 'meta'}, el('span', {class: 'role'}, m.role), m.name ? ' · ' + m.name : '',
        m.tool_calls && m.tool_calls.length ? ' · asks for ' + m.tool_calls.map(c => c.name).join(', ') : ''),
      m.content ? long(m.content, 'm' + e.seq) : ''];
      break;
    }
    case 'model_call': {
      const c = e.model_call;
      body = el('div', null, el('span', {class: 'chip'}, c.model || 'model'), c.role && c.role !== 'agent' ? el('span', {class: 'chip'}, c.role) : '',
        ' in ', el('b', null, fmt.int(c.usage.input_tokens)), ' · out ', el('b', null, fmt.int(c.usage.output_tokens)), ' tokens · ',
        fmt.usd(c.cost_usd), ' · ', fmt.dur(e.duration_ms || 0), c.stop_reason ? ' · stop: ' + c.stop_reason : '');
      break;
    }
    case 'tool_call': {
      const c = e.tool_call;
      body = [el('div', {class: 'meta'}, el('b', null, c.name), ' ', el('span', {class: 'mono'}, c.id)), c.arguments ? long(pretty(c.arguments), 'a' + e.seq) : ''];
      break;
    }
    case 'tool_result': {
      const r = e.tool_result;
      if (r.is_error) cls += ' is-error';
      body = [el('div', {class: 'meta'}, el('b', null, r.name), r.exit_code != null ? ' · exit ' + r.exit_code : '', ' · ', fmt.dur(e.duration_ms || 0),
        r.is_error ? el('span', {class: 'badge fail'}, ' error') : '', r.truncated ? ' · truncated' : '', r.fault ? ' · fault: ' + r.fault : '', r.divergence ? ' · diverged: ' + r.divergence : ''),
      long(r.output, 'o' + e.seq)];
      break;
    }
    case 'policy': {
      const p = e.policy;
      body = el('div', null, el('span', {class: 'badge fail'}, 'denied: ' + p.kind), p.host ? el('span', {class: 'mono'}, ' ' + p.host) : '', p.detail ? ' ' + p.detail : '');
      break;
    }
    case 'escalation': {
      const x = e.escalation;
      if (!x.granted) cls += ' denied';
      body = el('div', null, el('span', {class: 'badge ' + (x.granted ? 'pass' : 'fail')}, x.granted ? 'granted' : 'denied'), ' ', x.kind, x.reason ? ': ' + x.reason : '');
      break;
    }
    case 'checker': {
      const c = e.checker;
      body = [el('div', {class: 'meta'}, passBadge(c.pass), ' exit ', c.exit_code, ' · score ', fmt.score(c.score), ' · ', fmt.dur(e.duration_ms)), long(c.output, 'c' + e.seq)];
      break;
    }
    case 'stop':
      body = el('div', null, el('b', null, e.stop.reason), e.stop.detail ? ': ' + e.stop.detail : '');
      break;
    case 'log':
      body = long(e.log.text, 'l' + e.seq);
      break;
    case 'error':
      body = el('div', {class: 'error-box'}, el('b', null, e.error.kind + ': '), e.error.message);
      break;
    default:
      body = el('pre', null, pretty(e));
  }
  if (e.step) meta.push('step ' + e.step);
  return el('div', {class: cls, 'data-seq': e.seq},
    el('div', {class: 'when'}, '#' + e.seq, el('br'), off, meta.length ? el('br') : '', meta.join(' ')),
    el('div', {class: 'kind'}, e.kind.replace('_', ' ')),
    el('div', {class: 'body'}, body));
}

// ---- compare --------------------------------------------------------------

async function pageCompare(base, head) {
  if (!base || !head) throw new Error('compare needs ?base=RUN&head=RUN');
  const c = await api('/api/compare?base=' + encodeURIComponent(base) + '&head=' + encodeURIComponent(head));
  document.title = 'Compare · evals.si';
  crumbs(el('a', {href: '/'}, 'Runs'), el('span', null, 'Compare'));
  const arrow = s => s.delta == null ? '' : s.delta === 0 ? el('span', {class: 'muted'}, fmt.delta(0)) : el('span', {class: (s.delta > 0) !== !!s.lower_is_better ? 'up' : 'down'}, fmt.delta(s.delta));
  const order = {regressed: 0, improved: 1, incomparable: 2, added: 3, removed: 4, unchanged: 5};
  const recs = [...c.records].sort((a, b) => order[a.verdict] - order[b.verdict] || a.record_id.localeCompare(b.record_id));
  const trialLinks = (tc, side) => (tc.trial_ids || []).map((id, i) => el('a', {href: trialHref(id), class: 'chip', 'data-side': side}, side + ' #' + i));
  const runCard = (label, r) => el('div', {class: 'stat'}, el('div', {class: 'k'}, label), el('div', {class: 'v'}, el('a', {href: '/runs/' + encodeURIComponent(r.id)}, r.name)), el('div', {class: 'mono muted'}, r.id, ' ', status(r.status)));
  const showAll = el('input', {type: 'checkbox', id: 'show-unchanged', checked: true});
  const tbody = el('tbody');
  const renderRows = () => tbody.replaceChildren(...recs.filter(r => showAll.checked || r.verdict !== 'unchanged').map(r => {
    const pass = r.scores.find(s => s.name === c.pass_score);
    const changed = r.scores.filter(s => s.delta != null && s.delta !== 0 && s.name !== c.pass_score);
    return el('tr', {'data-record': r.record_id, 'data-verdict': r.verdict},
      el('td', {class: 'mono nowrap'}, r.record_id),
      el('td', null, verdict(r.verdict)),
      el('td', null, (r.decided_by || []).join(', ')),
      el('td', {class: 'num'}, pass ? [fmt.score(pass.base), ' → ', fmt.score(pass.head), ' ', arrow(pass)] : '–'),
      el('td', null, changed.map(s => el('span', {class: 'chip', title: fmt.score(s.base) + ' → ' + fmt.score(s.head)}, s.name + ' ', arrow(s)))),
      el('td', null, trialLinks(r.base, 'base'), trialLinks(r.head, 'head')));
  }));
  showAll.addEventListener('change', renderRows);
  renderRows();
  const counts = ['regressed', 'improved', 'unchanged', 'added', 'removed', 'incomparable'].filter(v => c.counts[v]).map(v => el('span', {class: 'badge v-' + v, id: 'count-' + v}, c.counts[v] + ' ' + v));
  put(
    el('h1', null, 'Compare runs'),
    el('div', {class: 'stats'}, runCard('Base', c.base), el('div', {class: 'stat'}, el('div', {class: 'k'}, ' '), el('div', {class: 'v'}, '→')), runCard('Head', c.head),
      el('a', {class: 'right', href: '/compare?base=' + encodeURIComponent(c.head.id) + '&head=' + encodeURIComponent(c.base.id)}, 'swap')),
    el('div', {class: 'toolbar', id: 'counts'}, counts, el('span', {class: 'muted'}, 'Verdicts by ' + c.pass_score + ' where both runs have it, else by any quality score.')),
    el('h2', null, 'Scores'),
    el('table', {id: 'compare-scores'}, el('thead', null, el('tr', null, ['Score', 'Base', 'Head', 'Delta'].map((h, i) => el('th', {class: i ? 'num' : null}, h)))),
      el('tbody', null, c.scores.map(s => el('tr', null, el('td', null, s.name), el('td', {class: 'num'}, fmt.score(s.base)), el('td', {class: 'num'}, fmt.score(s.head)), el('td', {class: 'num'}, arrow(s)))))),
    el('h2', null, 'Records', el('label', {class: 'muted', style: 'font-weight:normal;font-size:13px;margin-left:12px'}, showAll, ' show unchanged')),
    el('table', {id: 'compare-records'}, el('thead', null, el('tr', null, ['Record', 'Verdict', 'Decided by', c.pass_score, 'Other changes', 'Trials'].map(h => el('th', null, h)))), tbody),
  );
}

// ---- router ---------------------------------------------------------------

async function route() {
  const p = location.pathname;
  let m;
  if (p === '/') return pageRuns();
  if ((m = p.match(/^\/runs\/([^/]+)$/))) return pageRun(decodeURIComponent(m[1]));
  if ((m = p.match(/^\/trials\/([^/]+)$/))) return pageTrial(decodeURIComponent(m[1]));
  if (p === '/compare') {
    const q = new URLSearchParams(location.search);
    return pageCompare(q.get('base'), q.get('head'));
  }
  throw new Error('No such page: ' + p);
}

route().catch(showError);

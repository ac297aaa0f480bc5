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
  // known: a duration or cost that may be unknown shows "—", never "0 ms" or "$0".
  durK: ms => ms > 0 ? fmt.dur(ms) : '—',
  usdK: (v, known) => known ? fmt.usd(v) : '—',
  // pm is an estimate's 95% half-width, "±0.123", or '' when unknown.
  pm: e => e && e.known ? '±' + ((e.hi - e.lo) / 2).toFixed(3) : '',
  ci: e => e && e.known ? '[' + e.lo.toFixed(3) + ', ' + e.hi.toFixed(3) + ']' : '–',
};

const status = s => el('span', {class: 'status st-' + s}, s);
// runStatus reads a run's status as a person should: "completed with
// errors", red when nothing scored, amber when some trials errored.
const runStatus = r => el('span', {class: 'status st-' + r.status + (r.health && r.health !== 'ok' ? ' h-' + r.health : ''), 'data-health': r.health || 'ok',
  title: r.health === 'no_scores' ? 'every trial errored: nothing was scored' : r.health === 'errors' ? r.errored + ' trial(s) errored' : null}, r.label || r.status);
const estChip = e => el('span', {class: 'chip est', title: e.known ? 'mean ' + fmt.score(e.mean) + ', 95% interval ' + fmt.ci(e) + ', stderr ' + e.stderr.toFixed(3) + ', n=' + e.n : 'n=' + e.n},
  e.name + ' ', el('b', null, fmt.score(e.mean)), e.known ? el('span', {class: 'muted'}, ' ' + fmt.pm(e)) : '');
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
    ['', null], ['Run', 'id'], ['Name', 'name'], ['Target', 'target'], ['Status', 'status'], ['Created', 'created_at'],
    ['Trials', 'trials'], ['Errored', 'errored'], ['Scores (mean ±95%)', null], ['Spend', 'cost_usd'],
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
      el('td', {class: 'target'}, r.target || '–'),
      el('td', null, runStatus(r)),
      el('td', {class: 'nowrap'}, fmt.time(r.created_at)),
      el('td', {class: 'num trials-done'}, r.done + '/' + r.trials),
      el('td', {class: 'num'}, r.errored || ''),
      el('td', {class: 'scores'}, scoreSummary(r.estimates || [])),
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

// scoreSummary is a run's headline scores (the pass signal, pass@k) as
// chips, the rest behind "+N more" (listed in its tooltip).
function scoreSummary(ests) {
  const head = ests.filter(e => e.headline), rest = ests.filter(e => !e.headline);
  return [head.map(estChip), rest.length ? el('span', {class: 'muted more-scores', title: rest.map(e => e.name + ' ' + fmt.score(e.mean) + (e.known ? ' ' + fmt.pm(e) : '')).join('\n')}, '+' + rest.length + ' more') : ''];
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

  // Runs of the same spec name first, newest first: comparing a spec with
  // its previous run is the common case, an unrelated run the rare one.
  const others = allRuns.filter(o => o.id !== r.id);
  others.sort((a, b) => (b.name === r.name) - (a.name === r.name) || (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0));
  const pick = el('select', {id: 'compare-with'}, others.map(o => el('option', {value: o.id}, (o.name === r.name ? '' : '(other spec) ') + o.name + ' — ' + fmt.time(o.created_at) + ' — ' + o.id)));
  const compare = !others.length ? el('p', {class: 'muted'}, 'No other run to compare with yet.') : el('div', {class: 'toolbar'}, el('span', {class: 'muted'}, 'Compare this run (base) with'), pick,
    el('button', {id: 'compare-go', disabled: !others.length, onclick: () => {
      location.href = '/compare?base=' + encodeURIComponent(r.id) + '&head=' + encodeURIComponent(pick.value);
    }}, 'Compare'));

  const estCells = e => [el('td', {class: 'num'}, fmt.score(e.mean)), el('td', {class: 'num pm'}, fmt.pm(e) || '–'), el('td', {class: 'num ci'}, fmt.ci(e)), el('td', {class: 'num'}, e.known ? e.stderr.toFixed(3) : '–')];
  const evalRows = d.evaluators.flatMap(e => e.scores.length
    ? e.scores.map((s, i) => el('tr', {'data-score': s.name}, el('td', null, i ? '' : e.name), el('td', null, s.name), estCells(s), el('td', {class: 'num'}, s.n), el('td', {class: 'num'}, i ? '' : e.errored || '')))
    : [el('tr', null, el('td', null, e.name), el('td', {class: 'muted'}, '–'), el('td'), el('td'), el('td'), el('td'), el('td', {class: 'num'}, 0), el('td', {class: 'num'}, e.errored || ''))]);
  const passRows = (d.pass_at_k || []).map(p => el('tr', {'data-score': p.kind.replace('k', p.k)}, el('td', null, p.kind), el('td', null, p.kind.replace('k', p.k)), estCells(p), el('td', {class: 'num'}, p.records + ' rec.'), el('td')));

  const trialRows = d.records.flatMap(rec => rec.trials.map((t, i) => el('tr', {'data-trial': t.id},
    i ? null : el('td', {rowspan: rec.trials.length, class: 'mono nowrap'}, rec.record_id,
      rec.trials.length > 1 ? [el('br'), el('a', {class: 'sbs-link', href: '/compare/trials?a=' + encodeURIComponent(rec.trials[0].id) + '&b=' + encodeURIComponent(rec.trials[1].id)}, 'trials 1 ↔ 2 side by side')] : ''),
    el('td', {class: 'nowrap'}, el('a', {href: trialHref(t.id), class: 'trial-link'}, 'trial ' + t.trial), t.attempt > 1 ? el('span', {class: 'muted'}, ' (attempt ' + t.attempt + ')') : ''),
    el('td', null, status(t.status)),
    el('td', null, passBadge(t.passed)),
    el('td', null, scoreChips(t.scores)),
    el('td', {class: 'num'}, fmt.int(t.usage.input_tokens + t.usage.output_tokens)),
    el('td', {class: 'num'}, fmt.usdK(t.cost_usd, t.cost_usd > 0 || t.usage.input_tokens + t.usage.output_tokens > 0)),
    el('td', {class: 'num'}, fmt.durK(t.duration_ms)),
    el('td', {class: 'muted'}, t.error ? (t.error_kind + ': ' + t.error).slice(0, 160) : ''),
  )));

  const isoRows = d.isolation.map(g => {
    const rep = typeof g.report === 'object' ? g.report : {};
    return el('tr', null, el('td', null, rep.rung || '–'), el('td', null, rep.isolation || '–'), el('td', null, rep.network || '–'),
      el('td', null, (rep.limits || []).map(l => el('span', {class: 'chip'}, l))), el('td', {class: 'muted'}, (rep.notes || []).join('; ')), el('td', {class: 'num'}, g.trials));
  });
  const perRecord = r.trials_per_record > 1 ? ' (' + r.records + ' records × ' + r.trials_per_record + ')' : '';

  put(
    el('h1', null, r.name, runStatus(r)),
    el('div', {class: 'sub mono'}, r.id, r.target ? ' · ' + r.target : '', r.spec_path ? ' · ' + r.spec_path : '', ' · started ', fmt.time(r.created_at), r.finished_at ? ' · finished ' + fmt.time(r.finished_at) : ''),
    r.error ? el('div', {class: 'error-box'}, r.error) : null,
    r.health === 'no_scores' ? el('div', {class: 'error-box', id: 'health'}, 'Every trial errored: nothing was scored. See “Errors by kind” below.')
      : r.health === 'errors' ? el('div', {class: 'warn-box', id: 'health'}, r.errored + ' of ' + r.done + ' trials errored; the scores are over the others.') : null,
    el('div', {class: 'stats', id: 'run-stats'},
      stat('Records', r.records), stat('Trials done', r.done + '/' + r.trials + perRecord, 'stat-done'), stat('Passing', passing + '/' + r.done, 'stat-passing'),
      stat('Errored', r.errored, 'stat-errored'), stat('Spend', fmt.usd(r.cost_usd)), stat('Tokens', fmt.int(r.tokens)), stat('Elapsed', fmt.dur(Math.round(d.elapsed_seconds * 1000)))),
    compare,
    el('h2', null, 'Scores by evaluator', el('span', {class: 'muted h-note'}, ' mean over trials, ±95% = 1.96 standard errors, taken over records (a record\'s trials are not independent); pass@k over records')),
    evalRows.length || passRows.length
      ? el('table', {id: 'scores'}, el('thead', null, el('tr', null, ['Evaluator', 'Score', 'Mean', '±95%', '95% interval', 'Stderr', 'Scored', 'Errored'].map((h, i) => el('th', {class: i > 1 ? 'num' : null}, h)))), el('tbody', null, evalRows, passRows))
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
  const tr = makeTranscript({id: 'timeline'});
  const sentinel = el('div', {class: 'sentinel', id: 'more'});
  const state = {next: 0, more: true, loading: null, shown: 0};
  const search = makeSearch(tr.root, async () => { if (d.events <= 5000) while (state.more) await loadPage(); });
  const tools = el('div', {class: 'toolbar tr-tools', id: 'tr-tools'}, search.ui, tr.filters);
  renderTrial(d, tools, tr.root, sentinel);

  // loadPage fetches the next page of events; calls while one is in
  // flight share it. The "nothing more" check comes before the promise is
  // kept: a promise kept after an early return would never be cleared, and
  // every later call (the live tick's included) would share it and fetch
  // nothing.
  const loadPage = () => state.loading || (!state.more ? Promise.resolve() : state.loading = (async () => {
    try {
      const p = await api('/api/trials/' + encodeURIComponent(d.trial.id) + '/events?after=' + state.next + '&limit=500');
      const added = tr.add(p.events);
      for (const b of added) search.added(b);
      state.shown += p.events.length;
      state.next = p.next;
      state.more = p.more;
    } finally {
      state.loading = null;
    }
    sentinel.textContent = state.more ? 'Loading more… (' + fmt.int(state.shown) + ' of ' + fmt.int(d.events) + ' events)' : fmt.int(state.shown) + ' events';
  })());
  const fill = async () => {
    await loadPage();
    // Keep filling while the sentinel is still on screen.
    while (state.more && sentinel.getBoundingClientRect().top < innerHeight + 800) await loadPage();
  };
  new IntersectionObserver(es => { if (es.some(e => e.isIntersecting)) fill(); }, {rootMargin: '800px'}).observe(sentinel);
  await fill();

  const live = () => d.trial.status === 'running' || d.trial.status === 'pending';
  const tick = async () => {
    d = await api('/api/trials/' + encodeURIComponent(id));
    // Only new events are fetched; the page stays where the reader is.
    state.more = true;
    await loadPage();
    const head = document.getElementById('trial-head');
    if (head) head.replaceWith(trialHead(d));
    setLive(live());
    if (live()) poll(tick); else renderTrial(d, tools, tr.root, sentinel);
  };
  setLive(live());
  if (live()) poll(tick);
}

function trialHead(d) {
  const t = d.trial;
  const tokens = t.usage.input_tokens + t.usage.output_tokens;
  return el('div', {id: 'trial-head'},
    el('h1', null, t.record_id, el('span', {class: 'muted'}, '· trial ' + t.trial), status(t.status), passBadge(t.passed)),
    el('div', {class: 'sub mono'}, t.id, ' · attempt ', t.attempt, ' · run ', el('a', {href: '/runs/' + encodeURIComponent(d.run.id), id: 'run-link'}, d.run.name), t.started_at ? ' · started ' + fmt.time(t.started_at) : ''),
    t.error ? el('div', {class: 'error-box'}, el('b', null, t.error_kind + ': '), t.error) : null,
    el('div', {class: 'stats'},
      stat('Input tokens', fmt.int(t.usage.input_tokens)), stat('Output tokens', fmt.int(t.usage.output_tokens)),
      stat('Spend', fmt.usdK(t.cost_usd, t.cost_usd > 0 || tokens > 0)), stat('Duration', fmt.durK(t.duration_ms)), stat('Events', fmt.int(d.events), 'stat-events')),
    (d.siblings || []).length ? el('div', {class: 'toolbar', id: 'siblings'}, el('span', {class: 'muted'}, 'Side by side with'),
      d.siblings.map(s => el('a', {class: 'chip', href: '/compare/trials?a=' + encodeURIComponent(t.id) + '&b=' + encodeURIComponent(s.id)}, 'trial ' + s.trial + (s.passed == null ? '' : s.passed ? ' ✓' : ' ✗')))) : null,
  );
}

function renderTrial(d, tools, tl, sentinel) {
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
      fold(c.output || '(no output)'))
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
    el('h2', null, 'Transcript'),
    tools, tl, sentinel,
  );
}

function renderDiff(text, id) {
  const pre = el('pre', {class: 'diff', id: id || 'diff'});
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

// fold shows a long text's first lines with a "show all" button, so
// 100-KB tool outputs do not flood the transcript. The full text stays on
// the element (_full) for search, which unfolds what it finds.
const FOLD_LINES = 12, FOLD_CHARS = 1500;
function fold(text, cls) {
  text = text || '';
  const lines = text.split('\n');
  const pre = el('pre', {class: cls || null});
  if (lines.length <= FOLD_LINES && text.length <= FOLD_CHARS) {
    pre.textContent = text;
    return pre;
  }
  const short = lines.slice(0, FOLD_LINES - 2).join('\n').slice(0, FOLD_CHARS - 300);
  const btn = el('button', {class: 'ghost small show-all'});
  const box = el('div', {class: 'fold'}, pre, btn);
  box._full = text;
  box._set = open => {
    pre.textContent = open ? text : short + '\n…';
    btn.textContent = open ? 'show less' : 'show all (' + fmt.int(lines.length) + ' lines, ' + fmt.int(text.length) + ' chars)';
    box.classList.toggle('folded', !open);
  };
  btn.addEventListener('click', () => { box._set(box.classList.contains('folded')); box.dispatchEvent(new CustomEvent('refold', {bubbles: true})); });
  box._set(false);
  return box;
}

// ---- transcript -------------------------------------------------------------

// Event categories, for the filters: a block shows when any of its
// categories is on.
const CATEGORIES = [['message', 'Messages'], ['tool', 'Tool calls'], ['model', 'Model calls'], ['policy', 'Policy'], ['error', 'Errors'], ['other', 'Logs, checker, stop']];
const ms = t => t ? new Date(t).getTime() : NaN;

// makeTranscript renders events as a transcript: a tool call and its
// result in one block, an assistant turn's text without empty "asks for"
// rows, per-step headers with the step's time, tokens and cost. Events
// come in pages; add() appends and returns the blocks it made.
function makeTranscript(opt) {
  opt = opt || {};
  const root = el('div', {class: 'timeline' + (opt.compact ? ' compact' : ''), id: opt.id || null});
  const calls = new Map();   // tool call id → block
  const steps = new Map();   // step → header state
  const on = new Set(CATEGORIES.map(c => c[0]));
  const counts = {};
  const countEls = {};
  // t0 is the trial's first event time: offsets are from the trial's start.
  let t0 = opt.t0 != null ? opt.t0 : null, prevTime = null, curStep = null;

  const filters = el('div', {class: 'filters', id: opt.id ? opt.id + '-filters' : null}, CATEGORIES.map(([cat, label]) => {
    countEls[cat] = el('span', {class: 'muted'}, '0');
    return el('label', {class: 'fchip', 'data-cat': cat}, el('input', {type: 'checkbox', checked: true, 'data-cat': cat, onchange: e => {
      if (e.target.checked) on.add(cat); else on.delete(cat);
      for (const b of root.querySelectorAll('.ev')) show(b);
    }}), ' ' + label + ' ', countEls[cat]);
  }));
  const show = b => { b.hidden = !b._cats.some(c => on.has(c)); };
  const count = cats => { for (const c of cats) { counts[c] = (counts[c] || 0) + 1; countEls[c].textContent = counts[c]; } };

  const when = e => {
    const off = t0 == null || isNaN(ms(e.time)) ? '' : '+' + fmt.dur(ms(e.time) - t0);
    return el('div', {class: 'when'}, '#' + e.seq, el('br'), off);
  };
  const block = (e, kind, label, cats, ...body) => {
    const b = el('div', {class: 'ev k-' + kind, 'data-seq': e.seq, 'data-seqs': String(e.seq), 'data-cats': cats.join(' ')},
      when(e), el('div', {class: 'kind'}, label), el('div', {class: 'body'}, body));
    b._cats = cats;
    show(b);
    count(cats);
    return b;
  };
  const addSeq = (b, e) => { b.dataset.seqs += ' ' + e.seq; };

  // Step headers add up what the step's events say.
  const stepHead = e => {
    if (opt.compact || !e.step || e.step === curStep) return null;
    curStep = e.step;
    if (steps.has(e.step)) return null;
    const st = {start: Infinity, end: -Infinity, tokens: 0, cost: 0, costKnown: false, calls: 0, stats: el('span', {class: 'step-stats'})};
    steps.set(e.step, st);
    return el('div', {class: 'step-head', 'data-step': e.step}, el('b', null, 'Step ' + e.step), st.stats);
  };
  const account = e => {
    const st = steps.get(e.step);
    if (!st) return;
    const end = ms(e.time);
    if (!isNaN(end)) { st.end = Math.max(st.end, end); st.start = Math.min(st.start, end - (e.duration_ms || 0)); }
    if (e.model_call) {
      st.calls++;
      st.tokens += e.model_call.usage.input_tokens + e.model_call.usage.output_tokens;
      if (e.cost_source) { st.cost += e.model_call.cost_usd || 0; st.costKnown = true; }
    }
    const span = st.end - st.start;
    st.stats.textContent = ' · ' + fmt.durK(span > 0 ? span : 0) + ' · ' + fmt.int(st.tokens) + ' tokens · ' + fmt.usdK(st.cost, st.costKnown);
  };

  const argsView = args => {
    let v = args;
    try { v = typeof args === 'string' ? JSON.parse(args) : args; } catch { /* shown as sent */ }
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      const keys = Object.keys(v);
      if (keys.length === 1 && typeof v[keys[0]] === 'string' && ['command', 'cmd', 'code', 'script'].includes(keys[0])) return fold('$ ' + v[keys[0]], 'args cmd');
      if (!keys.length) return null;
      // key: value lines, a multi-line string (a file's content) as it
      // reads rather than JSON-escaped.
      if (keys.every(k => v[k] === null || typeof v[k] !== 'object')) {
        return fold(keys.map(k => typeof v[k] === 'string' ? (v[k].includes('\n') ? k + ':\n' + v[k] : k + ': ' + v[k]) : k + ': ' + JSON.stringify(v[k])).join('\n'), 'args');
      }
    }
    return fold(pretty(args), 'args');
  };

  const toolBlock = (e, call) => {
    const meta = el('span', {class: 'res-meta'});
    const out = el('div', {class: 'res'}, el('span', {class: 'muted pending'}, 'no result yet'));
    const b = block(e, 'tool_call', 'tool call', ['tool'],
      el('div', {class: 'meta'}, el('b', {class: 'tool-name'}, call.name || '?'), call.id ? el('span', {class: 'mono muted'}, ' ' + call.id) : '', meta),
      call.arguments != null ? argsView(call.arguments) : '', out);
    b._start = ms(e.time);
    b._meta = meta;
    b._out = out;
    if (call.id) calls.set(call.id, b);
    return b;
  };
  const fillResult = (b, e, r) => {
    b._done = true;
    addSeq(b, e);
    b.classList.add('k-tool_result');
    const dur = e.duration_ms || (ms(e.time) - b._start);
    b._meta.replaceChildren(r.exit_code != null ? ' · exit ' + r.exit_code : '', ' · ', el('span', {class: 'dur'}, fmt.durK(dur)),
      r.is_error ? el('span', null, ' ', el('span', {class: 'badge fail'}, 'error')) : '', r.truncated ? ' · truncated' : '', r.fault ? ' · fault: ' + r.fault : '', r.divergence ? ' · diverged: ' + r.divergence : '');
    b._out.replaceChildren(fold(r.output || '', 'output'));
    if (r.is_error) {
      b.classList.add('is-error');
      b._cats.push('error');
      b.dataset.cats = b._cats.join(' ');
      count(['error']);
      show(b);
    }
  };

  const render = e => {
    switch (e.kind) {
      case 'message': {
        const m = e.message;
        if (m.role === 'tool' && m.tool_call_id && calls.has(m.tool_call_id)) {
          const b = calls.get(m.tool_call_id);
          if (!b._done) fillResult(b, e, {output: m.content, name: m.name});
          else addSeq(b, e);
          return [];
        }
        const out = [];
        if (m.content) out.push(block(e, 'message', m.role, ['message'], m.name ? el('div', {class: 'meta'}, m.name) : '', fold(m.content, 'content')));
        // The calls an assistant turn asks for render as tool blocks
        // (where their results will land); a turn with neither text nor
        // calls renders nothing.
        for (const c of m.tool_calls || []) if (!c.id || !calls.has(c.id)) out.push(toolBlock(e, c));
        return out;
      }
      case 'tool_call': {
        const c = e.tool_call;
        const b = c.id && calls.get(c.id);
        if (b) { addSeq(b, e); b._start = ms(e.time); return []; }
        return [toolBlock(e, c)];
      }
      case 'tool_result': {
        const r = e.tool_result;
        const b = r.call_id && calls.get(r.call_id);
        if (b && !b._done) { fillResult(b, e, r); return []; }
        const nb = toolBlock(e, {name: r.name, id: ''});
        fillResult(nb, e, r);
        nb.dataset.seqs = String(e.seq);
        return [nb];
      }
      case 'model_call': {
        const c = e.model_call;
        const derived = prevTime == null ? 0 : ms(e.time) - prevTime;
        return [block(e, 'model_call', 'model call', ['model'], el('div', null, el('span', {class: 'chip'}, c.model || 'model'), c.role && c.role !== 'agent' ? el('span', {class: 'chip'}, c.role) : '',
          ' in ', el('b', null, fmt.int(c.usage.input_tokens)), ' · out ', el('b', null, fmt.int(c.usage.output_tokens)), ' tokens · ',
          el('span', {class: 'cost', title: e.cost_source === 'pricing' ? 'usage × the run’s pricing' : e.cost_source ? 'recorded' : 'no price known for this model'}, fmt.usdK(c.cost_usd, !!e.cost_source), e.cost_source === 'pricing' ? ' (priced)' : ''),
          ' · ', el('span', {class: 'dur'}, fmt.durK(e.duration_ms || derived)), c.stop_reason ? ' · stop: ' + c.stop_reason : ''))];
      }
      case 'policy': {
        const p = e.policy;
        return [block(e, 'policy', 'policy', ['policy'], el('div', null, el('span', {class: 'badge fail'}, 'denied: ' + p.kind), p.host ? el('span', {class: 'mono'}, ' ' + p.host) : '', p.detail ? ' ' + p.detail : ''))];
      }
      case 'escalation': {
        const x = e.escalation;
        const b = block(e, 'escalation', 'escalation', ['policy'], el('div', null, el('span', {class: 'badge ' + (x.granted ? 'pass' : 'fail')}, x.granted ? 'granted' : 'denied'), ' ', x.kind, x.reason ? ': ' + x.reason : ''));
        if (!x.granted) b.classList.add('denied');
        return [b];
      }
      case 'checker': {
        const c = e.checker;
        return [block(e, 'checker', 'checker', ['other'], el('div', {class: 'meta'}, passBadge(c.pass), ' exit ', c.exit_code, ' · score ', fmt.score(c.score), ' · ', fmt.durK(e.duration_ms)), fold(c.output))];
      }
      case 'stop':
        return [block(e, 'stop', 'stop', ['other'], el('div', null, el('b', null, e.stop.reason), e.stop.detail ? ': ' + e.stop.detail : ''))];
      case 'log':
        return e.log.text ? [block(e, 'log', 'log', ['other'], fold(e.log.text))] : [];
      case 'error':
        return [block(e, 'error', 'error', ['error'], el('div', {class: 'error-box'}, el('b', null, e.error.kind + ': '), e.error.message))];
      default:
        return [block(e, e.kind, e.kind.replace('_', ' '), ['other'], el('pre', null, pretty(e)))];
    }
  };

  const add = events => {
    const made = [];
    const frag = document.createDocumentFragment();
    for (const e of events) {
      if (t0 == null && !isNaN(ms(e.time))) t0 = ms(e.time);
      const head = stepHead(e);
      if (head) frag.append(head);
      for (const b of render(e)) { frag.append(b); made.push(b); }
      account(e);
      if (!isNaN(ms(e.time))) prevTime = ms(e.time);
    }
    root.append(frag);
    return made;
  };
  return {root, filters, add};
}

// makeSearch searches the text of a transcript: matches are highlighted,
// folded outputs holding one are unfolded, and next/prev (or Enter and
// Shift+Enter) walk the matches. before() runs before a new search (the
// trial page loads the rest of a trial's events).
function makeSearch(root, before) {
  let q = '', hits = [], cur = -1;
  const input = el('input', {type: 'search', id: 'trial-search', placeholder: 'Search this trial…'});
  const count = el('span', {class: 'muted', id: 'search-count'});
  const go = d => {
    hits = hits.filter(m => m.isConnected && m.offsetParent !== null);
    if (!hits.length) { count.textContent = q ? 'no match' : ''; return; }
    if (cur >= 0 && hits[cur]) hits[cur].classList.remove('cur');
    cur = ((cur < 0 && d < 0 ? 0 : cur) + d + hits.length) % hits.length;
    hits[cur].classList.add('cur');
    hits[cur].scrollIntoView({block: 'center'});
    count.textContent = (cur + 1) + ' of ' + hits.length;
  };
  const clear = scope => {
    for (const m of scope.querySelectorAll('mark.hit')) m.replaceWith(document.createTextNode(m.textContent));
    scope.normalize();
  };
  const mark = scope => {
    if (!q) return;
    for (const f of scope.querySelectorAll('.fold.folded')) if (f._full.toLowerCase().includes(q)) f._set(true);
    const walker = document.createTreeWalker(scope, NodeFilter.SHOW_TEXT, {acceptNode: n => n.parentElement.closest('button, .when, .kind') ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
    const nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    for (const n of nodes) {
      const t = n.nodeValue, lt = t.toLowerCase();
      let i = lt.indexOf(q);
      if (i < 0) continue;
      const frag = document.createDocumentFragment();
      let last = 0;
      while (i >= 0) {
        frag.append(t.slice(last, i), el('mark', {class: 'hit'}, t.slice(i, i + q.length)));
        last = i + q.length;
        i = lt.indexOf(q, last);
      }
      frag.append(t.slice(last));
      n.replaceWith(frag);
    }
  };
  const collect = () => { hits = [...root.querySelectorAll('mark.hit')]; };
  let seq = 0;
  const run = async () => {
    const mine = ++seq;
    q = input.value.trim().toLowerCase();
    if (q && before) await before();
    if (mine !== seq) return;
    clear(root);
    mark(root);
    collect();
    cur = -1;
    go(1);
  };
  let timer = null;
  input.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(run, 200); });
  input.addEventListener('keydown', e => { if (e.key === 'Enter') { e.preventDefault(); clearTimeout(timer); if (q !== input.value.trim().toLowerCase()) run(); else go(e.shiftKey ? -1 : 1); } });
  // Folding a block re-renders its text: mark it again.
  root.addEventListener('refold', e => { mark(e.target); collect(); count.textContent = hits.length ? (Math.max(cur, 0) + 1) + ' of ' + hits.length : q ? 'no match' : ''; });
  const ui = el('span', {class: 'search'}, input,
    el('button', {class: 'ghost', id: 'search-prev', title: 'previous match (Shift+Enter)', onclick: () => go(-1)}, '↑'),
    el('button', {class: 'ghost', id: 'search-next', title: 'next match (Enter)', onclick: () => go(1)}, '↓'), count);
  return {ui, added: b => { if (q) { mark(b); collect(); } }};
}

// ---- trials side by side --------------------------------------------------

async function allEvents(id, cap) {
  const out = [];
  let after = 0;
  for (;;) {
    const p = await api('/api/trials/' + encodeURIComponent(id) + '/events?after=' + after + '&limit=1000');
    out.push(...p.events);
    after = p.next;
    if (!p.more || out.length >= cap) return {events: out, more: p.more};
  }
}

// pageTrialPair shows two trials of the same record side by side: the
// transcripts aligned by agent step, then the two diffs.
async function pageTrialPair(a, b) {
  if (!a || !b) throw new Error('side by side needs ?a=TRIAL&b=TRIAL');
  const CAP = 5000;
  const [da, db, ea, eb] = await Promise.all([api('/api/trials/' + encodeURIComponent(a)), api('/api/trials/' + encodeURIComponent(b)), allEvents(a, CAP), allEvents(b, CAP)]);
  document.title = da.trial.record_id + ' side by side · evals.si';
  crumbs(el('a', {href: '/'}, 'Runs'), el('span', null, 'Side by side'), el('span', null, da.trial.record_id));
  // Rows: events before the first step, each step, events after the last.
  const rows = new Map();
  const group = (evs, side) => {
    let seenStep = false;
    for (const e of evs) {
      let key = e.step ? 's' + e.step : seenStep ? 'after' : 'before';
      if (e.step) seenStep = true;
      if (!rows.has(key)) rows.set(key, {a: [], b: []});
      rows.get(key)[side].push(e);
    }
  };
  group(ea.events, 'a');
  group(eb.events, 'b');
  const order = k => k === 'before' ? -1 : k === 'after' ? 1e9 : Number(k.slice(1));
  const keys = [...rows.keys()].sort((x, y) => order(x) - order(y));
  const side = (d, label) => {
    const t = d.trial;
    const tokens = t.usage.input_tokens + t.usage.output_tokens;
    return el('div', {class: 'card side-head', id: 'side-' + label},
      el('div', {class: 'k muted'}, label === 'a' ? 'Left' : 'Right'),
      el('div', null, el('a', {href: trialHref(t.id), class: 'trial-title'}, t.record_id + ' · trial ' + t.trial), ' ', status(t.status), ' ', passBadge(t.passed)),
      el('div', {class: 'mono muted'}, 'run ', el('a', {href: '/runs/' + encodeURIComponent(d.run.id)}, d.run.name), ' · ', t.id),
      el('div', null, scoreChips(t.scores)),
      el('div', {class: 'muted'}, fmt.int(tokens) + ' tokens · ' + fmt.usdK(t.cost_usd, t.cost_usd > 0 || tokens > 0) + ' · ' + fmt.durK(t.duration_ms) + ' · ' + fmt.int(d.events) + ' events'),
      t.error ? el('div', {class: 'error-box'}, el('b', null, t.error_kind + ': '), t.error) : null);
  };
  const start = evs => evs.length ? ms(evs[0].time) : null;
  const t0 = {a: start(ea.events), b: start(eb.events)};
  const cell = (evs, key, side) => {
    if (!evs.length) return el('div', {class: 'sbs-cell empty'}, key.startsWith('s') ? 'no step ' + key.slice(1) : '');
    const tr = makeTranscript({compact: true, t0: t0[side]});
    tr.add(evs);
    return el('div', {class: 'sbs-cell'}, tr.root);
  };
  const label = k => k === 'before' ? 'start' : k === 'after' ? 'end' : 'step ' + k.slice(1);
  put(
    el('h1', null, da.trial.record_id, el('span', {class: 'muted'}, '· two trials side by side')),
    da.trial.record_id !== db.trial.record_id ? el('div', {class: 'warn-box'}, 'These trials are of different records (' + da.trial.record_id + ', ' + db.trial.record_id + ').') : null,
    ea.more || eb.more ? el('div', {class: 'warn-box'}, 'Only the first ' + fmt.int(CAP) + ' events of each trial are shown.') : null,
    el('div', {class: 'grid2'}, side(da, 'a'), side(db, 'b')),
    el('h2', null, 'Diffs'),
    el('div', {class: 'grid2', id: 'sbs-diffs'},
      da.diff ? renderDiff(da.diff, 'diff-a') : el('p', {class: 'empty', id: 'diff-a'}, 'No changes.'),
      db.diff ? renderDiff(db.diff, 'diff-b') : el('p', {class: 'empty', id: 'diff-b'}, 'No changes.')),
    el('h2', null, 'Transcripts by step'),
    el('div', {class: 'sbs', id: 'sbs'}, keys.map(k => el('div', {class: 'sbs-row', 'data-step': k},
      el('div', {class: 'sbs-step'}, label(k)), cell(rows.get(k).a, k, 'a'), cell(rows.get(k).b, k, 'b')))),
  );
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
  const runCard = (label, r) => el('div', {class: 'stat'}, el('div', {class: 'k'}, label), el('div', {class: 'v'}, el('a', {href: '/runs/' + encodeURIComponent(r.id)}, r.name)), el('div', {class: 'mono muted'}, r.id, ' ', runStatus(r)));
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
      el('td', null, trialLinks(r.base, 'base'), trialLinks(r.head, 'head'),
        (r.base.trial_ids || []).length && (r.head.trial_ids || []).length ? el('a', {class: 'sbs-link', href: '/compare/trials?a=' + encodeURIComponent(r.base.trial_ids[0]) + '&b=' + encodeURIComponent(r.head.trial_ids[0])}, 'side by side') : ''));
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
  if (p === '/compare/trials') {
    const q = new URLSearchParams(location.search);
    return pageTrialPair(q.get('a'), q.get('b'));
  }
  if (p === '/compare') {
    const q = new URLSearchParams(location.search);
    return pageCompare(q.get('base'), q.get('head'));
  }
  throw new Error('No such page: ' + p);
}

route().catch(showError);

// The owner page: Needs you, Fleet, Activity. Plain JavaScript, no build step, no dependencies.
//
// Rules kept here:
// - Agents' text (messages, titles, paths, audit details) goes on the page only through
//   textContent and attribute values, never as HTML, and through visible(): a control, bidi or
//   zero-width character shows as its \u escape (newlines and tabs stay), so no text reorders or
//   hides what follows it.
// - Every POST carries the session's CSRF token (X-CSRF-Token), read from the page's meta tag.
// - Live updates arrive over /api/events (Server-Sent Events); after any (re)connect the page
//   refetches everything, so nothing missed while the daemon was away stays stale.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const CSRF = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  const AUDIT_PAGE = 25;
  const MESSAGES_LIMIT = 50;

  const state = {
    agents: [],
    launchers: new Map(),
    cards: [],
    needs: [], // drafts connect may have left in a composer (GET /api/needs)
    acts: [], // control's acts waiting on the person's card (GET /api/acts)
    pairRequests: [], // other boxes asking to pair, pending (GET /api/pairing/requests); [] when not federated
    restarts: new Map(), // pane -> {id, step, outcome, detail, preset, at}
    errors: new Map(), // pane -> text of the last refused toggle
    pending: new Set(), // panes with a toggle request in flight
    loggedOut: false,
    audit: { newest: true, rows: [], hasOlder: false, hasNewer: false, seenActors: new Set(), seenOutcomes: new Set() },
  };

  // --- DOM helpers --------------------------------------------------------------------------------

  // Every character that could hide or reorder text (C0/C1 controls, bidi overrides and isolates,
  // zero-width spaces and joiners, line/paragraph separators) as its escape; newline and tab stay.
  const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;
  function visible(text) {
    return String(text).replace(HIDDEN, (c) => (c === "\n" || c === "\t" ? c : "\\u" + c.codePointAt(0).toString(16).padStart(4, "0")));
  }

  // h("div", {class: "x", data: {k: "v"}, attrs: {...}, on: {click: f}}, child, "text", [more])
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    const p = props || {};
    if (p.class) el.className = p.class;
    if (p.text !== undefined) el.textContent = visible(p.text);
    for (const [k, v] of Object.entries(p.attrs || {})) if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : visible(v));
    for (const [k, v] of Object.entries(p.data || {})) if (v !== null && v !== undefined) el.dataset[k] = String(v);
    for (const [k, v] of Object.entries(p.on || {})) el.addEventListener(k, v);
    append(el, children);
    return el;
  }
  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(visible(c)));
    }
    return el;
  }
  const SVG = "http://www.w3.org/2000/svg";
  function icon(name, label) {
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "icon");
    svg.dataset.icon = name;
    if (label) {
      svg.setAttribute("role", "img");
      svg.setAttribute("aria-label", label);
    } else {
      svg.setAttribute("aria-hidden", "true");
    }
    const use = document.createElementNS(SVG, "use");
    use.setAttribute("href", "#icon-" + name);
    svg.append(use);
    return svg;
  }

  // Keyed rendering: keep elements whose signature did not change (and the focus inside them).
  function reconcile(list, items, keyOf, sigOf, build) {
    const old = new Map();
    for (const el of Array.from(list.children)) old.set(el.dataset.key, el);
    items.forEach((item, i) => {
      const key = keyOf(item);
      const sig = sigOf(item);
      let el = old.get(key);
      if (el && el.dataset.sig !== sig) {
        const fresh = build(item);
        fresh.dataset.key = key;
        fresh.dataset.sig = sig;
        const focusKey = el.contains(document.activeElement) ? document.activeElement.dataset.focus : null;
        el.replaceWith(fresh);
        if (focusKey) {
          const again = fresh.querySelector(`[data-focus="${CSS.escape(focusKey)}"]`);
          if (again && !again.disabled) again.focus({ preventScroll: true });
        }
        el = fresh;
      } else if (!el) {
        el = build(item);
        el.dataset.key = key;
        el.dataset.sig = sig;
      }
      old.delete(key);
      if (list.children[i] !== el) list.insertBefore(el, list.children[i] || null);
    });
    for (const el of old.values()) {
      if (el.contains(document.activeElement)) {
        const next = el.nextElementSibling || el.previousElementSibling;
        el.remove();
        const target = next && next.querySelector("button:not(:disabled)");
        if (target) target.focus({ preventScroll: true });
        else list.closest("section").querySelector("h2").focus({ preventScroll: true });
      } else {
        el.remove();
      }
    }
  }

  function toast(text) {
    const t = $("toast");
    t.textContent = text;
    t.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.hidden = true; }, 4500);
  }

  // A revocation's answer (Off, disconnect-all) names the messages to other boxes whose cancels those
  // boxes have not yet confirmed ("1 message: box laptop has not yet confirmed it is cancelled"): text.
  function withUnconfirmed(text, result) {
    const lines = (result && result.cancels_unconfirmed) || [];
    return lines.length ? `${text} ${lines.join("; ")}.` : text;
  }

  function confirmDialog({ title, body, ok, check }) {
    const dialog = $("confirm");
    $("confirm-title").textContent = title;
    $("confirm-body").textContent = body;
    $("confirm-ok").textContent = ok;
    $("confirm-extra").hidden = !check;
    $("confirm-check").checked = false;
    $("confirm-check-label").textContent = check || "";
    dialog.returnValue = "";
    dialog.showModal();
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    });
  }

  // --- talking to connectd ------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body) {
    const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" };
    if (method !== "GET") {
      init.headers["Content-Type"] = "application/json";
      init.headers["X-CSRF-Token"] = CSRF;
      init.body = JSON.stringify(body || {});
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, "offline", "connectd cannot be reached");
    }
    let data = null;
    try { data = await response.json(); } catch (err) { data = null; }
    if (response.status === 401) {
      showLoggedOut((data && data.message) || "Your login ended.");
      throw new ApiError(401, (data && data.error) || "unauthorized", (data && data.message) || "not logged in");
    }
    if (!response.ok) {
      throw new ApiError(response.status, (data && data.error) || "error", (data && data.message) || `HTTP ${response.status}`);
    }
    return data;
  }

  // the exact login command for this daemon (its data directory), as the server rendered it
  function loginCommand() {
    const meta = document.querySelector('meta[name="login-command"]');
    return (meta && meta.content) || "connectd token";
  }

  function showLoggedOut(message) {
    if (state.loggedOut) return;
    state.loggedOut = true;
    closeEvents();
    setLive("offline", "Logged out");
    for (const s of document.querySelectorAll(".section, .foot")) s.hidden = true;
    const notice = $("notice");
    notice.replaceChildren(
      h("strong", { text: "Logged out. " }),
      message + " Run this on the computer that runs connectd and open the URL it prints:",
      h("pre", { class: "cmd", text: loginCommand() }),
    );
    notice.hidden = false;
  }

  // --- names --------------------------------------------------------------------------------------

  const agentByPane = (pane) => state.agents.find((a) => a.pane === pane);
  const agentByActor = (actor) => actor && state.agents.find((a) => a.actor === actor);

  // "%3 (main:1)": the pane id with the tmux session:window a person switches to
  const panePlace = (a) => (a.window ? `${a.pane} (${a.window})` : a.pane);
  // a pane named for a person: its place, its program, and its title, else the directory it works in
  function paneLabel(a) {
    const bits = [panePlace(a), a.harness];
    if (a.control) bits.push("control");
    const about = a.title || a.cwd;
    return bits.join(" · ") + (about ? ` · ${about}` : "");
  }
  // {name, id}: a short name for a person and the full actor for the record
  function describeActor(actor, pane) {
    const a = agentByActor(actor) || (pane ? agentByPane(pane) : null);
    if (a) return { name: paneLabel(a), id: actor || a.address };
    if (actor === "owner" || (actor || "").startsWith("owner:")) return { name: "you", id: actor };
    return { name: actor || pane || "unknown", id: actor && pane ? pane : "" };
  }

  // --- time ---------------------------------------------------------------------------------------

  function fmtTime(at) {
    if (!at) return "";
    const d = new Date(at * 1000);
    const today = new Date();
    const sameDay = d.toDateString() === today.toDateString();
    const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
    return sameDay ? time : `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
  }
  function fmtLeft(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s >= 3600) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min left`;
    if (s >= 60) return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")} left`;
    return `${s} s left`;
  }
  function tick() {
    const now = Date.now();
    for (const el of document.querySelectorAll("[data-deadline]")) {
      const left = Number(el.dataset.deadline) - now;
      el.textContent = fmtLeft(left);
      el.classList.toggle("left-urgent", left < 60000);
    }
  }

  // --- Needs you ----------------------------------------------------------------------------------

  async function loadCards() {
    const cards = await api("GET", "/api/cards");
    const now = Date.now();
    state.cards = cards.filter((c) => c.state === "pending").map((c) => ({ ...c, deadline: now + c.expires_in * 1000 }));
    renderCards();
  }

  function renderCards() {
    const list = $("cards");
    reconcile(
      list,
      state.cards,
      (c) => c.id,
      (c) => JSON.stringify([c.text, c.hop, c.sender, c.recipient, c.recipient_pane, c.sender_name, c.recipient_name, c.words, c.answers]),
      buildCard,
    );
    for (const c of state.cards) {
      const el = list.querySelector(`[data-key="${CSS.escape(c.id)}"] [data-deadline]`);
      if (el) el.dataset.deadline = String(c.deadline);
    }
    renderNeedsCount();
    tick();
  }

  function renderNeedsCount() {
    const n = state.cards.length + (state.needs || []).length + (state.acts || []).length + (state.pairRequests || []).length;
    $("cards-empty").hidden = n > 0;
    const count = $("needs-count");
    count.textContent = String(n);
    count.dataset.n = String(n);
  }

  // Drafts connect may have left in a composer: the person clears or sends them; the item goes
  // by itself once the pane is read with an empty composer.
  async function loadNeeds() {
    state.needs = await api("GET", "/api/needs");
    reconcile(
      $("needs-notes"),
      state.needs,
      (n) => n.id,
      (n) => JSON.stringify([n.summary, n.why, n.message_id, n.sender, n.at]),
      (n) =>
        h(
          "li",
          { class: "card note", attrs: { role: "status" }, data: { testid: "left-draft" } },
          h("p", { class: "summary", text: n.summary }),
          h("p", { class: "meta", text: n.message_id
            ? `${n.why}. Message ${n.message_id}${n.sender ? ` from ${describeActor(n.sender).name}` : ""}, ${fmtTime(n.at)}: clear the composer or send it yourself.`
            : `${n.why} (restart ${n.ref}), ${fmtTime(n.at)}: clear the composer if the command is still there.` }),
        ),
    );
    renderNeedsCount();
  }

  // Control's acts: each card shows exactly what will happen, on which pane, with its tier.
  const TIER_WORDS = { 2: "Tier 2: a card every time", 3: "Tier 3: runs as a command or ends a process" };
  async function loadActs() {
    const acts = await api("GET", "/api/acts");
    const now = Date.now() / 1000;
    state.acts = acts.filter((a) => a.state === "awaiting_consent").map((a) => ({ ...a, deadline: Date.now() + (a.expires_at - now) * 1000 }));
    reconcile($("acts"), state.acts, (a) => a.act_id, (a) => JSON.stringify([a.shown, a.tier, a.target, a.actor]), buildActCard);
    for (const a of state.acts) {
      const el = $("acts").querySelector(`[data-key="${CSS.escape(a.act_id)}"] [data-deadline]`);
      if (el) el.dataset.deadline = String(a.deadline);
    }
    renderNeedsCount();
    tick();
  }

  function buildActCard(a) {
    const error = h("p", { class: "error", attrs: { hidden: true, role: "alert" } });
    const answer = (decision) => async (ev) => {
      const card = ev.currentTarget.closest("li");
      for (const b of card.querySelectorAll("button")) b.disabled = true;
      try {
        await api("POST", `/api/acts/${encodeURIComponent(a.act_id)}/${decision}`, {});
        toast(decision === "approve" ? "Approved: control's act runs now." : "Declined.");
        state.acts = state.acts.filter((x) => x.act_id !== a.act_id);
        $("acts").querySelector(`[data-key="${CSS.escape(a.act_id)}"]`)?.remove();
        renderNeedsCount();
      } catch (err) {
        error.textContent = err.message;
        error.hidden = false;
        for (const b of card.querySelectorAll("button")) b.disabled = false;
      }
    };
    return h(
      "li",
      { class: "card act", data: { testid: "act-card", tier: a.tier }, attrs: { "aria-label": `Control asks: ${a.tool} on ${a.target}` } },
      h("p", { class: "summary" }, icon("crown", "Control"), h("strong", { text: ` Control asks: ${a.tool}` }), " ", h("span", { class: "chip", data: { tier: a.tier }, text: TIER_WORDS[a.tier] || `Tier ${a.tier}` })),
      h("pre", { class: "text", text: a.shown }),
      h("p", { class: "meta" }, h("span", { text: `On ${a.target} · from ${describeActor(a.actor).name} · ` }), h("span", { data: { deadline: "0" } })),
      h(
        "div",
        { class: "actions" },
        h("button", { class: "btn primary", attrs: { type: "button" }, on: { click: answer("approve") } }, icon("check"), "Approve"),
        h("button", { class: "btn", attrs: { type: "button" }, on: { click: answer("decline") } }, icon("x"), "Decline"),
      ),
      error,
    );
  }

  // --- Pairings (federation) ------------------------------------------------------------------------
  // Another box's name is its owner's text: it goes on the page through h() (textContent), like an
  // agent's. A box not set up for federation answers 409 not_federated: the panel stays hidden.

  // The agents the paired boxes share (their directory entries as this box holds them): read-only
  // rows under the fleet, each with its box and its list's age; nothing here connects or grants them
  // (their owners do). Their text is another machine's: it goes on the page through h() (textContent).
  async function loadRemoteAgents() {
    const remote = await api("GET", "/api/pairing/agents");
    reconcile($("remote-agents-list"), remote, (a) => `${a.box.id} ${a.pane}`, (a) => JSON.stringify(a), buildRemoteAgent);
    $("remote-agents").hidden = remote.length === 0;
  }

  function buildRemoteAgent(a) {
    const name = a.title || a.harness;
    return h(
      "li",
      { class: "card pane-compact remote", data: { testid: "remote-agent", box: a.box.id, pane: a.pane, stale: String(Boolean(a.stale)) }, attrs: { "aria-label": `${name} on box ${a.box.name}, read-only` } },
      h("span", { class: "badge-icon" }, icon("wifi", "On a paired box")),
      h(
        "span",
        { class: "pane-line" },
        h("strong", { text: name }),
        h("span", { class: "sub", text: ` ${a.harness} · ${a.activity || "unknown"} · ` }),
        h("code", { class: "mono", data: { testid: "remote-address" }, text: a.address }),
      ),
      h("span", { class: "why", data: { testid: "remote-box" }, text: `box ${a.box.name} (${a.box.fingerprint}) · ${a.freshness}` }),
    );
  }

  async function loadPairing() {
    let status;
    try {
      status = await api("GET", "/api/pairing/status");
    } catch (err) {
      if (err.status === 409) {
        state.federated = false;
        $("remote-agents").hidden = true;
        state.pairRequests = [];
        $("pair-requests").replaceChildren();
        $("pairings").hidden = true;
        renderNeedsCount();
        return;
      }
      throw err;
    }
    state.federated = true;
    schedule("remote", 0);
    const [requests, pairings] = await Promise.all([api("GET", "/api/pairing/requests"), api("GET", "/api/pairing/pairings")]);
    state.pairRequests = requests;
    reconcile($("pair-requests"), requests, (r) => r.id, (r) => JSON.stringify([r.name, r.box, r.fingerprint, r.state]), buildPairRequest);
    renderNeedsCount();
    const me = status.this_box;
    $("federation-status").textContent = visible(
      `This box: ${me.name} (${me.box}), fingerprint ${me.fingerprint}. ` +
        (status.nats ? `NATS ${status.nats}: ${status.connected ? "connected" : "not connected"}${status.last_error ? ` (${status.last_error})` : ""}.` : "No NATS server named: connectd federate --nats URL."),
    );
    $("federation-status").dataset.connected = String(Boolean(status.connected));
    $("pairings-empty").hidden = pairings.length > 0;
    $("pairings-list").replaceChildren(
      ...pairings.map((p) =>
        h(
          "li",
          { data: { testid: "pairing", box: p.box, state: p.state } },
          h("strong", { class: "box-name", text: p.name }),
          h("span", { class: "muted", text: ` ${p.box} · since ${fmtTime(p.since)} · ` }),
          h("span", { class: "chip", data: { state: p.state }, text: p.state + (p.removed_by ? ` (by ${p.removed_by})` : "") }),
          h("code", { class: "fingerprint", text: p.fingerprint }),
          h("span", {
            class: "muted",
            data: { testid: "pairing-heard" },
            text: ` · last heard ${p.heard_at ? fmtTime(p.heard_at) : "not since the daemon started"} · `,
          }),
          h("span", {
            class: "muted",
            data: { testid: "pairing-directory", freshness: p.directory || "none yet" },
            text: `directory ${p.directory || "none yet"} · `,
          }),
          h("span", { class: "muted", data: { testid: "pairing-settings" }, text: (p.settings_words || []).join(" ") }),
        ),
      ),
    );
    $("pairings").hidden = false;
  }

  function buildPairRequest(r) {
    const error = h("p", { class: "error", attrs: { hidden: true, role: "alert" } });
    const answer = (decision) => async (ev) => {
      const card = ev.currentTarget.closest("li");
      for (const b of card.querySelectorAll("button")) b.disabled = true;
      try {
        await api("POST", `/api/pairing/requests/${encodeURIComponent(r.id)}/${decision}`, {});
        toast(decision === "approve" ? `Paired with box ${r.name}.` : `Declined box ${r.name}.`);
        schedule("pairing", 0);
      } catch (err) {
        error.textContent = err.message;
        error.hidden = false;
        for (const b of card.querySelectorAll("button")) b.disabled = false;
      }
    };
    return h(
      "li",
      { class: "card pair-request", data: { testid: "pair-request", box: r.box }, attrs: { "aria-label": `Box ${r.name} asks to pair` } },
      h("p", { class: "summary" }, icon("wifi"), h("strong", { class: "box-name", text: ` Box ${r.name}` }), h("span", { text: ` (${r.box}) asks to pair with this box.` })),
      h("p", { class: "meta" }, h("span", { text: "Its fingerprint: " }), h("code", { class: "fingerprint", data: { testid: "their-fingerprint" }, text: r.fingerprint })),
      h("p", { class: "meta" }, h("span", { text: "This box's fingerprint: " }), h("code", { class: "fingerprint", data: { testid: "our-fingerprint" }, text: r.this_box.fingerprint })),
      h("p", { class: "meta", text: "Approve only if its owner reads you the same fingerprint (and sees this box's) over a channel you trust." }),
      h(
        "div",
        { class: "actions" },
        h("button", { class: "btn primary", attrs: { type: "button" }, on: { click: answer("approve") } }, icon("check"), "Approve"),
        h("button", { class: "btn", attrs: { type: "button" }, on: { click: answer("decline") } }, icon("x"), "Decline"),
      ),
      error,
    );
  }

  async function stopControl() {
    try {
      const result = await api("POST", "/api/control/stop", {});
      toast(`Stopped control: ${result.stopped.join(", ")}.`);
      schedule("agents", 0);
      schedule("acts", 0);
    } catch (err) {
      reportError(err);
    }
  }

  // Start control (POST /api/launch with control: true), offered while no control runs. The engine
  // refuses a second control, a bad cwd or launcher; the dialog shows its reason and stays open.
  const runsControl = (a) => a.control && a.scopes.includes("act");
  const controlLaunchers = () => Array.from(state.launchers.values()).filter((l) => l.connectable && !l.opaque);

  async function openStartControl() {
    const dialog = $("start-control-dialog");
    const select = $("start-control-launcher");
    const cwd = $("start-control-cwd");
    const error = $("start-control-error");
    const launchers = controlLaunchers();
    const chosen = select.value;
    select.replaceChildren(...launchers.map((l) => h("option", { attrs: { value: l.name }, text: `${l.name} (${l.harness})` })));
    if (launchers.some((l) => l.name === chosen)) select.value = chosen;
    select.disabled = !launchers.length;
    $("start-control-ok").disabled = !launchers.length;
    error.textContent = launchers.length ? "" : "No connectable launcher is configured (launchers.toml): control needs one connectd can give its endpoint to.";
    error.hidden = !!launchers.length;
    dialog.showModal();
    if (!cwd.value) {
      try {
        const dirs = await api("GET", "/api/sessions/dirs?limit=1");
        if (!cwd.value && dirs.length) cwd.value = dirs[0].cwd;
      } catch (err) {
        // no history index: the person types the directory
      }
    }
  }

  async function startControl(ev) {
    ev.preventDefault();
    const error = $("start-control-error");
    const ok = $("start-control-ok");
    ok.disabled = true;
    error.hidden = true;
    try {
      const result = await api("POST", "/api/launch", {
        launcher: $("start-control-launcher").value,
        cwd: $("start-control-cwd").value.trim(),
        connect: "collaborate",
        control: true,
      });
      $("start-control-dialog").close();
      toast(`Started control in ${result.pane}.`);
      schedule("agents", 0);
    } catch (err) {
      if (err.status === 401) return;
      error.textContent = err.message;
      error.hidden = false;
    } finally {
      ok.disabled = false;
    }
  }

  function buildCard(c) {
    // the daemon names both panes where a person finds them (%N (session:window)), never by a raw actor
    const from = { name: c.sender_name || describeActor(c.sender).name };
    const to = { name: c.recipient_name || describeActor(c.recipient, c.recipient_pane).name };
    const error = h("p", { class: "error", attrs: { hidden: true, role: "alert" } });
    const textId = `text-${c.id}`;
    const act = (kind) => async (ev) => {
      const card = ev.currentTarget.closest("li");
      const hadFocus = card.contains(document.activeElement);
      for (const b of card.querySelectorAll("button")) b.disabled = true;
      const keepFocus = () => {
        if (!hadFocus || card.isConnected) return;
        const next = $("cards").querySelector("button:not(:disabled)");
        (next || $("needs-you-h")).focus({ preventScroll: true });
      };
      try {
        if (kind === "decline") await api("POST", `/api/cards/${encodeURIComponent(c.id)}/decline`, {});
        else await api("POST", `/api/cards/${encodeURIComponent(c.id)}/approve`, { pair: kind === "pair" });
        toast(kind === "decline" ? "Declined." : kind === "pair" ? `Approved: ${from.name} may message ${to.name}.` : "Approved this message.");
        state.cards = state.cards.filter((x) => x.id !== c.id);
        renderCards();
        keepFocus();
      } catch (err) {
        if (err.status === 404 || err.code === "card_closed") {
          toast("That card was already answered or cancelled.");
          state.cards = state.cards.filter((x) => x.id !== c.id);
          renderCards();
          keepFocus();
        } else {
          error.textContent = err.message;
          error.hidden = false;
          for (const b of card.querySelectorAll("button")) b.disabled = false;
        }
      }
      schedule("cards", 50);
      schedule("messages", 300);
    };
    const words = c.words || {};
    return h(
      "li",
      { class: "card consent", attrs: { "aria-label": `Message from ${from.name} to ${to.name}` } },
      h(
        "dl",
        { class: "route" },
        h("dt", { text: "From" }),
        h("dd", null, h("span", { class: "who", text: from.name, data: { testid: "card-from" } })),
        h("dt", { text: "To" }),
        h("dd", null, h("span", { class: "who", text: to.name, data: { testid: "card-to" } })),
      ),
      c.answers != null
        ? h(
            "div",
            { class: "answers", data: { testid: "card-answers" } },
            h("span", { class: "answers-h", text: "In reply to" }),
            h("div", { class: "quote", text: c.answers }),
          )
        : null,
      h("div", { class: "msg-text", text: c.text, attrs: { id: textId, tabindex: "0", "aria-label": "Message text" }, data: { testid: "card-text" } }),
      h(
        "div",
        { class: "meta" },
        h("span", { text: words.hop || `hop ${c.hop}`, data: { testid: "card-hop" } }),
        h("span", null, h("time", { data: { deadline: c.deadline } })),
      ),
      h(
        "div",
        { class: "actions" },
        h("button", { class: "btn primary", text: words.approve_once || "Approve once", attrs: { type: "button", "aria-describedby": textId }, data: { focus: "once" }, on: { click: act("once") } }),
        h("button", { class: "btn", text: words.approve_pair || "Approve pair", attrs: { type: "button" }, data: { focus: "pair" }, on: { click: act("pair") } }),
        h("button", { class: "btn danger", text: words.decline || "Decline", attrs: { type: "button" }, data: { focus: "decline" }, on: { click: act("decline") } }),
      ),
      h(
        "details",
        { class: "record" },
        h("summary", { text: "For the record" }),
        h(
          "dl",
          { class: "route" },
          h("dt", { text: "From" }),
          h("dd", { class: "who-id", text: c.sender }),
          h("dt", { text: "To" }),
          h("dd", { class: "who-id", text: c.recipient }),
          h("dt", { text: "Message" }),
          h("dd", { class: "who-id", text: c.message_id }),
        ),
      ),
      error,
    );
  }

  // --- Fleet --------------------------------------------------------------------------------------

  const PRESETS = [
    { value: "off", label: "Off", icon: "circle-off" },
    { value: "observe", label: "Observe", icon: "eye" },
    { value: "collaborate", label: "Collaborate", icon: "messages-square" },
  ];
  const RESTART_STEPS = ["planned", "waiting_idle", "record_persisted", "remain_on_exit_set", "rechecking_idle", "exit_sent", "process_ended", "respawned", "option_restored", "giving_up", "retry_restore", "closed"];
  const RESTART_WORDS = {
    planned: "Starting the restart",
    waiting_idle: "Waiting until the agent is idle with an empty composer",
    record_persisted: "Restart recorded",
    remain_on_exit_set: "Keeping the pane open while the agent exits",
    rechecking_idle: "Checking it is still idle",
    exit_sent: "Asked the agent to exit",
    process_ended: "The agent exited; relaunching it on its session",
    respawned: "Relaunched; waiting for it to start",
    option_restored: "Restoring the pane's options",
    recovering: "Recovering the restart",
    giving_up: "Giving up the restart; restoring the pane's options",
    retry_restore: "tmux is failing; restoring the pane's options again shortly",
  };
  const RESTART_OUTCOMES = {
    restarted: "Restarted and connected.",
    left_alone: "The agent was found running and left alone.",
    pane_gone: "The pane is gone.",
    gave_up: "The restart gave up; the pane's options are restored: look at the pane.",
    cancelled: "Cancelled: nothing was touched.",
  };

  async function loadAgents() {
    const [agents, launchers] = await Promise.all([
      api("GET", "/api/agents"),
      state.launchers.size ? null : api("GET", "/api/launchers"),
    ]);
    if (launchers) state.launchers = new Map(launchers.map((l) => [l.name, l]));
    // agents first, plain shells last; otherwise tmux's order (stable: cards never jump on a toggle)
    state.agents = agents.map((a, i) => [a, i]).sort(([x, i], [y, j]) => (x.harness === "shell") - (y.harness === "shell") || i - j).map(([a]) => a);
    renderAgents();
    renderCards(); // names may have changed
    fillPaneSelects();
  }

  // Whether Connect can be offered on this pane, and how: "live" (a connected agent: the toggle
  // changes its grant at once), "restart" (a running agent that can be connected only by relaunch).
  // The daemon decides (connectcore.launchers.connect_offer); the page only shows it.
  function connectOffer(a) {
    return a.offer || { enabled: false, reason: "connectd has not said whether Connect can be offered here." };
  }

  function reading(a) {
    if (a.harness === "shell") return "shell";
    if (a.activity === "dialog") return "dialog";
    if (a.composer === "draft") return "draft";
    return a.activity || "unknown";
  }

  const WIDE = window.matchMedia("(min-width: 760px)");
  const openFacts = new Set(); // panes whose folded facts the person opened: they stay open across refreshes

  function renderAgents() {
    const list = $("agents");
    reconcile(
      list,
      state.agents,
      (a) => a.pane,
      (a) => JSON.stringify([a, connectOffer(a), state.restarts.get(a.pane) || null, state.errors.get(a.pane) || null, state.pending.has(a.pane)]),
      buildAgent,
    );
    $("agents-empty").hidden = state.agents.length > 0;
    $("disconnect-all").disabled = !state.agents.some((a) => a.connect !== "off");
    $("start-control").hidden = state.agents.some(runsControl);
  }

  // "2 messages wait: until ...": one line per distinct wait, counted, in the order the API lists them
  function waitingLines(waiting) {
    const counts = new Map();
    for (const w of waiting || []) counts.set(w.waits_for, (counts.get(w.waits_for) || 0) + 1);
    return [...counts].map(([words, n]) => `${n} ${n === 1 ? "message waits" : "messages wait"}: ${words}`);
  }

  // a pane that runs no agent (a shell): one line, nothing to connect
  function buildOtherPane(a) {
    return h(
      "li",
      { class: "card pane-compact", data: { connect: "off", pane: a.pane }, attrs: { "aria-label": `${paneLabel(a)}, not an agent` } },
      h("span", { class: "badge-icon" }, icon("terminal", "A shell")),
      h("span", { class: "pane-line" }, h("strong", { text: `${panePlace(a)} · ${a.harness}` }), " ", h("span", { class: "sub mono", text: a.cwd || "" })),
      h("span", { class: "why", text: "not an agent" }),
      h("button", { class: "btn quiet", attrs: { type: "button", "aria-label": `Activity of ${a.pane}` }, data: { focus: "activity" }, on: { click: () => showActivity(a.pane) } }, icon("scroll-text")),
    );
  }

  function buildAgent(a) {
    if (a.harness === "shell") return buildOtherPane(a);
    const offer = connectOffer(a);
    const restart = state.restarts.get(a.pane);
    const running = restart && !restart.final;
    const pending = state.pending.has(a.pane);
    const connected = a.connect !== "off";
    const badge = a.control
      ? icon("crown", "Control: acts on the fleet after your card")
      : a.connect === "observe"
      ? icon("eye", "Connected: Observe")
      : a.connect === "collaborate"
        ? icon("messages-square", "Connected: Collaborate")
        : connected
          ? icon("messages-square", `Connected: ${a.scopes.join(", ")}`)
          : icon(a.harness === "shell" ? "terminal" : "bot", "Not connected");
    const sessionActor = a.session ? `agent:${a.session.harness}:${a.session.session_id}` : null;
    const facts = [
      ["Where", a.cwd || "—", "mono"],
      a.repo ? ["Repo", a.repo, "mono"] : null,
      a.branch ? ["Branch", a.branch, "mono"] : null,
      a.pr_links && a.pr_links.length ? ["PRs", a.pr_links.join(" "), "mono"] : null,
      a.note ? ["Note", a.note, ""] : null,
      a.release_status ? ["Release", a.release ? `${a.release} (${a.release_status})` : "not known", a.release ? "mono" : ""] : null,
      a.harness === "shell" ? null : ["Bound to", a.session ? `${a.session.harness} session ${a.session.session_id}` : (a.session_note ? `no agent session bound: ${a.session_note}` : "no agent session bound"), a.session ? "mono" : ""],
      a.actor && a.actor !== sessionActor ? ["Actor", a.actor, "mono"] : null,
      a.launcher ? ["Launcher", a.launcher, ""] : null,
      connected && a.connect === "custom" ? ["Scopes", a.scopes.join(", "), ""] : null,
    ].filter(Boolean);
    const seg = h("div", { class: "seg", attrs: { role: "group", "aria-label": `Connect for ${a.pane}` } });
    for (const p of PRESETS) {
      const pressed = a.connect === p.value;
      seg.append(
        h(
          "button",
          {
            attrs: { type: "button", "aria-pressed": pressed ? "true" : "false", disabled: !offer.enabled || running || pending },
            data: { preset: p.value, focus: `preset-${p.value}` },
            on: { click: () => choosePreset(a, p.value) },
          },
          icon(p.icon),
          p.label,
        ),
      );
    }
    const reason = !offer.enabled
      ? h("p", { class: "why" }, icon("lock"), h("span", { text: offer.reason }))
      : offer.mode === "restart" && !running
        ? h("p", { class: "why" }, icon("rotate-cw"), h("span", { text: "Running without Connect: connecting it restarts it on the same conversation." }))
        : null;
    let progress = null;
    if (restart) {
      const idx = RESTART_STEPS.indexOf(restart.step);
      const words = restart.final
        ? RESTART_OUTCOMES[restart.outcome] || `Restart ended: ${restart.outcome || restart.step}.`
        : RESTART_WORDS[restart.step] || restart.step;
      progress = h(
        "div",
        { class: "progress", attrs: { role: "status" }, data: { step: restart.step } },
        h("span", null, icon("rotate-cw"), " ", words, restart.detail ? ` (${restart.detail})` : ""),
        h("progress", { attrs: { max: String(RESTART_STEPS.length - 1), value: String(restart.final ? RESTART_STEPS.length - 1 : Math.max(0, idx)), "aria-label": "Restart progress" } }),
      );
    }
    const error = state.errors.get(a.pane);
    return h(
      "li",
      { class: "card agent", data: { connect: a.connect, pane: a.pane }, attrs: { "aria-label": `${paneLabel(a)}, Connect ${a.connect}` } },
      h(
        "div",
        { class: "agent-head" },
        h("span", { class: "badge-icon" }, badge),
        h("div", { class: "agent-title" }, h("strong", { text: `${panePlace(a)} · ${a.harness}` }), a.title ? h("span", { class: "sub", text: a.title }) : null),
        h("span", { class: "chip", data: { reading: reading(a) }, text: reading(a) }),
      ),
      waitingLines(a.waiting).length
        ? h("div", { class: "waits", attrs: { role: "status" }, data: { testid: "waiting" } }, waitingLines(a.waiting).map((line) => h("p", null, icon("inbox"), h("span", { text: line }))))
        : null,
      // the facts: open on a wide screen, folded on a phone (so several agents fit on one screen)
      h(
        "details",
        {
          class: "facts-fold",
          attrs: WIDE.matches || openFacts.has(a.pane) ? { open: "open" } : {},
          on: { toggle: (e) => (e.target.open ? openFacts.add(a.pane) : openFacts.delete(a.pane)) },
        },
        h("summary", { text: "Details" }),
        h("dl", { class: "facts" }, facts.map(([k, v, cls]) => [h("dt", { text: k }), h("dd", { class: cls, text: v })])),
      ),
      a.release_note
        ? h("p", { class: "why release", attrs: { role: "status" }, data: { testid: "release-note" } }, icon("triangle-alert"), h("span", { text: a.release_note }))
        : null,
      h("fieldset", { class: "connect" }, h("legend", { text: "Connect" }), seg, reason, progress, error ? h("p", { class: "error", attrs: { role: "alert" }, text: error }) : null),
      h(
        "div",
        { class: "agent-foot" },
        h("button", { class: "btn quiet", attrs: { type: "button" }, data: { focus: "activity" }, on: { click: () => showActivity(a.pane) } }, icon("scroll-text"), "Activity"),
        runsControl(a)
          ? h("button", { class: "btn", attrs: { type: "button" }, data: { testid: "stop-control" }, on: { click: stopControl } }, icon("power"), "Stop control")
          : null,
      ),
    );
  }

  async function choosePreset(a, preset) {
    if (a.connect === preset) return;
    const offer = connectOffer(a);
    if (!offer.enabled) return;
    state.errors.delete(a.pane);
    if (offer.mode === "restart") {
      if (preset === "off") return;
      const label = preset === "observe" ? "Observe" : "Collaborate";
      const ok = await confirmDialog({
        title: "Restart this agent to connect it?",
        body: `${paneLabel(a)} runs without Connect. connectd waits until it is idle with an empty composer, asks it to exit through its own exit command, and resumes the same conversation in this pane with Connect set to ${label}. The conversation survives; the terminal's scrollback does not.`,
        ok: "Restart and connect",
      });
      if (!ok) return;
      state.pending.add(a.pane);
      renderAgents();
      try {
        const result = await api("POST", "/api/restart", { pane: a.pane, preset });
        state.restarts.set(a.pane, { id: result.restart, step: result.step || "planned", outcome: null, detail: "", final: false });
      } catch (err) {
        state.errors.set(a.pane, err.message);
      } finally {
        state.pending.delete(a.pane);
        renderAgents();
      }
      return;
    }
    state.pending.add(a.pane);
    renderAgents();
    try {
      const result = await api("POST", `/api/panes/${encodeURIComponent(a.pane)}/connect`, { preset });
      if (result && result.needs_restart) {
        state.pending.delete(a.pane);
        await loadAgents();
        const fresh = agentByPane(a.pane);
        if (fresh && fresh.connect === "off") return choosePreset(fresh, preset);
      }
      toast(preset === "off" ? withUnconfirmed(`${a.pane}: Connect is off.`, result) : `${a.pane}: Connect set to ${preset}.`);
    } catch (err) {
      state.errors.set(a.pane, err.message);
    } finally {
      state.pending.delete(a.pane);
    }
    await loadAgents().catch(() => {});
  }

  function onRestart(item) {
    const pane = item.pane_id;
    if (!pane) return;
    const final = item.step === "closed" || item.step === "cancelled";
    const prev = state.restarts.get(pane) || {};
    state.restarts.set(pane, { ...prev, id: (item.key || [])[0], step: item.step, outcome: item.outcome, detail: item.detail || "", final });
    renderAgents();
    if (final) {
      schedule("agents", 100);
      setTimeout(() => {
        const now = state.restarts.get(pane);
        if (now && now.final) {
          state.restarts.delete(pane);
          renderAgents();
        }
      }, 10000);
    }
  }

  async function disconnectAll() {
    const n = state.agents.filter((a) => a.connect !== "off").length;
    const ok = await confirmDialog({
      title: "Disconnect all agents?",
      body: `Connect turns off at once for ${n === 1 ? "the one connected agent" : `all ${n} connected agents`}: their next call fails with “not connected”, and their open cards and queued messages are cancelled.`,
      ok: "Disconnect all",
      check: "Also log out every browser (this one too)",
    });
    if (!ok) return;
    const endSessions = $("confirm-check").checked;
    try {
      const result = await api("POST", "/api/disconnect-all", { end_page_sessions: endSessions });
      toast(withUnconfirmed(`Disconnected ${result.disconnected} agent${result.disconnected === 1 ? "" : "s"}.`, result));
      if (endSessions) {
        showLoggedOut(`Every browser was logged out (${result.page_sessions_ended}).`);
        return;
      }
    } catch (err) {
      toast(`Disconnect all failed: ${err.message}`);
    }
    await Promise.all([loadAgents(), loadCards()]).catch(() => {});
  }

  // --- logged-in browsers (page sessions) -----------------------------------------------------------

  async function loadSessions() {
    const rows = await api("GET", "/api/page-sessions");
    const list = $("page-sessions");
    list.replaceChildren(
      ...rows.map((s) => {
        const end = h("button", { attrs: { type: "button" }, class: "btn quiet", text: s.current ? "Log out" : "End", on: { click: () => endSession(s) } });
        return h(
          "li",
          { data: { session: s.id } },
          h("code", { text: s.id }),
          h("span", { class: "muted", text: ` since ${fmtTime(s.created)}${s.current ? " · this browser" : ""} ` }),
          h("span", { class: "agent", text: s.agent || "unknown browser" }),
          end,
        );
      }),
    );
  }

  async function endSession(s) {
    const ok = await confirmDialog({
      title: s.current ? "Log out this browser?" : `End session ${s.id}?`,
      body: `The browser ${s.agent || ""} is logged out at once; it needs a new login link from ${loginCommand()}.`,
      ok: s.current ? "Log out" : "End session",
    });
    if (!ok) return;
    try {
      await api("POST", `/api/page-sessions/${encodeURIComponent(s.id)}/end`, {});
      toast(`Session ${s.id} ended.`);
    } catch (err) {
      toast(`Ending the session failed: ${err.message}`);
    }
    await loadSessions().catch(() => {});
  }

  // --- Activity: messages -------------------------------------------------------------------------

  function fillPaneSelects() {
    for (const id of ["msg-pane", "audit-pane"]) {
      const select = $(id);
      const current = select.value;
      const first = select.options[0];
      const options = [first.cloneNode(true)];
      const panes = new Set(state.agents.map((a) => a.pane));
      if (current && !panes.has(current)) panes.add(current);
      for (const pane of Array.from(panes).sort((x, y) => Number(x.slice(1)) - Number(y.slice(1)))) {
        const a = agentByPane(pane);
        options.push(h("option", { attrs: { value: pane }, text: a ? paneLabel(a) : pane }));
      }
      const sig = options.map((o) => o.value + o.textContent).join("|");
      if (select.dataset.sig !== sig) {
        select.replaceChildren(...options);
        select.value = current;
        select.dataset.sig = sig;
      }
    }
    const actors = $("audit-actors");
    for (const a of state.agents) if (a.actor) state.audit.seenActors.add(a.actor);
    ["owner", "owner:page", "daemon"].forEach((x) => state.audit.seenActors.add(x));
    fillDatalist(actors, state.audit.seenActors);
  }
  function fillDatalist(list, values) {
    const sig = Array.from(values).sort().join("|");
    if (list.dataset.sig === sig) return;
    list.dataset.sig = sig;
    list.replaceChildren(...Array.from(values).sort().map((v) => h("option", { attrs: { value: v } })));
  }

  const GOOD = new Set(["delivered", "done", "allowed", "issued", "approved_once", "approved_pair", "restarted", "set", "bound"]);
  const WAIT = new Set(["queued", "awaiting_consent", "ready", "guarding", "typing", "pending", "cancelling"]);
  const BAD = new Set(["refused", "declined", "cancelled", "expired", "unconfirmed", "not_confirmed", "error", "gave_up", "revoked"]);
  const outcomeKind = (o) => (GOOD.has(o) ? "good" : WAIT.has(o) ? "wait" : BAD.has(o) ? "bad" : "other");

  async function loadMessages() {
    const pane = $("msg-pane").value;
    const params = new URLSearchParams({ limit: String(MESSAGES_LIMIT) });
    if (pane) params.set("pane", pane);
    const rows = await api("GET", `/api/messages?${params}`);
    const list = $("messages");
    list.replaceChildren(
      ...rows.map((m) => {
        const from = describeActor(m.from);
        const to = describeActor(null, m.recipient_pane);
        const outcome = m.outcome === "queued" && m.state ? m.state.replace(/_/g, " ") : m.outcome;
        const dir = pane ? (m.recipient_pane === pane ? "received" : "sent") : null;
        return h(
          "li",
          { data: { outcome: m.outcome, messageId: m.message_id } },
          h(
            "div",
            { class: "row-head" },
            h("time", { text: fmtTime(m.created_at) }),
            dir ? h("span", { class: "dir", text: dir }) : null,
            h("span", {
              text:
                `${from.name}${m.from_box ? ` (box ${m.from_box})` : ""} → ` +
                (m.to_box ? `${m.to} on box ${m.to_box}` : to.name),
            }),
            h("span", { class: "outcome", data: { kind: outcomeKind(m.outcome) }, text: outcome }),
          ),
          m.reason ? h("div", { class: "muted", text: m.reason }) : null,
          h("div", { class: "msg-text", text: m.text || "" }),
        );
      }),
    );
    $("messages-empty").hidden = rows.length > 0;
  }

  // --- Activity: audit log ------------------------------------------------------------------------
  // The API lists newest first: the newest page is `limit=N`, each older one `before=<oldest id shown>`;
  // "newer" asks for the records after the newest shown, oldest first (order=oldest). The page shows
  // newest first.

  function auditFilters() {
    const p = new URLSearchParams();
    const actor = $("audit-actor").value.trim();
    const pane = $("audit-pane").value;
    const outcome = $("audit-outcome").value.trim();
    const seconds = Number($("audit-time").value || 0);
    if (actor) p.set("actor", actor);
    if (pane) p.set("pane", pane);
    if (outcome) p.set("outcome", outcome);
    if (seconds) p.set("since", String(Date.now() / 1000 - seconds));
    return p;
  }
  async function fetchAudit(filters, after, limit) {
    const p = new URLSearchParams(filters);
    p.set("after", String(after));
    p.set("order", "oldest");
    p.set("limit", String(limit));
    return api("GET", `/api/audit?${p}`);
  }
  // The newest AUDIT_PAGE records with id < bound (Infinity: the newest of all), oldest first.
  async function auditBefore(filters, bound) {
    const p = new URLSearchParams(filters);
    if (bound !== Infinity) p.set("before", String(bound));
    p.set("limit", String(AUDIT_PAGE));
    const rows = await api("GET", `/api/audit?${p}`);
    return rows.reverse();
  }

  let auditSeq = 0;
  async function loadAudit(where) {
    const seq = ++auditSeq;
    const filters = auditFilters();
    const a = state.audit;
    let rows;
    if (where === "newer" && a.rows.length) {
      rows = await fetchAudit(filters, Math.max(...a.rows.map((r) => r.id)), AUDIT_PAGE);
      if (!rows.length) rows = null;
    } else if (where === "older" && a.rows.length) {
      rows = await auditBefore(filters, Math.min(...a.rows.map((r) => r.id)));
      if (!rows.length) rows = null;
    } else {
      rows = await auditBefore(filters, Infinity);
      where = "newest";
    }
    if (seq !== auditSeq) return; // a newer request superseded this one
    if (rows) a.rows = rows.slice().sort((x, y) => y.id - x.id);
    else if (where === "newest") a.rows = [];
    const ids = a.rows.map((r) => r.id);
    const [older, newer] = ids.length
      ? await Promise.all([fetchAudit(filters, 0, 1), fetchAudit(filters, Math.max(...ids), 1)])
      : [[], []];
    if (seq !== auditSeq) return;
    a.hasOlder = older.length > 0 && older[0].id < Math.min(...ids);
    a.hasNewer = newer.length > 0;
    a.newest = where === "newest" || !a.hasNewer; // the newest page follows new records live
    renderAudit();
  }

  function renderAudit() {
    const a = state.audit;
    const list = $("audit");
    list.replaceChildren(
      ...a.rows.map((r) => {
        a.seenOutcomes.add(r.outcome);
        a.seenActors.add(r.actor);
        const who = describeActor(r.actor);
        const detail = [r.scope ? `scope ${r.scope}` : null, r.target ? `target ${r.target}` : null, r.message_id ? `message ${r.message_id}` : null, r.detail || null].filter(Boolean).join(" · ");
        return h(
          "li",
          { data: { id: r.id, actor: r.actor, outcome: r.outcome } },
          h(
            "div",
            { class: "row-head" },
            h("time", { text: fmtTime(r.at) }),
            h("span", { class: "line", text: r.action }),
            h("span", { class: "outcome", data: { kind: outcomeKind(r.outcome) }, text: r.outcome }),
          ),
          h("div", { class: "actor", text: who.name === r.actor ? r.actor : `${who.name} (${r.actor})` }),
          detail ? h("div", { class: "detail", text: detail }) : null,
        );
      }),
    );
    fillDatalist($("audit-outcomes"), a.seenOutcomes);
    fillDatalist($("audit-actors"), a.seenActors);
    $("audit-older").disabled = !a.hasOlder;
    $("audit-newer").disabled = !a.hasNewer || a.newest;
    $("audit-newest").disabled = a.newest && !a.hasNewer;
    $("audit-status").textContent = a.rows.length
      ? `${a.rows.length} ${a.rows.length === 1 ? "record" : "records"} (ids ${Math.min(...a.rows.map((r) => r.id))}–${Math.max(...a.rows.map((r) => r.id))})${a.newest ? ", the newest" : ""}`
      : "No records match.";
  }

  function showActivity(pane) {
    $("msg-pane").value = pane;
    $("audit-pane").value = pane;
    loadMessages().catch(reportError);
    loadAudit("newest").catch(reportError);
    const heading = $("activity-h");
    heading.setAttribute("tabindex", "-1");
    heading.scrollIntoView({ block: "start" });
    heading.focus({ preventScroll: true });
  }

  // --- live updates -------------------------------------------------------------------------------

  const loaders = {
    agents: loadAgents,
    cards: loadCards,
    needs: loadNeeds,
    acts: loadActs,
    pairing: loadPairing,
    remote: loadRemoteAgents,
    messages: loadMessages,
    audit: () => (state.audit.newest ? loadAudit("newest") : Promise.resolve()),
  };
  const timers = {};
  const running = {};
  function schedule(name, delay) {
    if (state.loggedOut) return;
    clearTimeout(timers[name]);
    timers[name] = setTimeout(async () => {
      if (running[name]) {
        running[name] = "again";
        return;
      }
      running[name] = true;
      try {
        await loaders[name]();
      } catch (err) {
        reportError(err);
      } finally {
        const again = running[name] === "again";
        running[name] = false;
        if (again) schedule(name, 50);
      }
    }, delay);
  }
  function reportError(err) {
    if (err && err.status === 401) return;
    if (err && err.code === "offline") return; // the live indicator says so
    toast(err && err.message ? err.message : String(err));
  }

  function refreshAll() {
    state.launchers = new Map();
    for (const name of Object.keys(loaders)) schedule(name, 0);
  }

  function setLive(kind, text) {
    const el = $("live");
    el.dataset.state = kind;
    const words = text || { live: "Live", reconnecting: "Reconnecting…", connecting: "Connecting…", offline: "Offline" }[kind];
    el.replaceChildren(icon(kind === "live" ? "wifi" : "wifi-off"), h("span", { class: "live-text", text: words }));
  }

  let source = null;
  let retryTimer = null;
  let backoff = 1000;
  function closeEvents() {
    clearTimeout(retryTimer);
    if (source) source.close();
    source = null;
  }
  function openEvents() {
    closeEvents();
    if (state.loggedOut) return;
    const es = new EventSource("/api/events");
    source = es;
    es.onopen = () => {
      backoff = 1000;
      setLive("live");
      refreshAll();
    };
    es.onmessage = (ev) => {
      let item;
      try { item = JSON.parse(ev.data); } catch (err) { return; }
      onEvent(item);
    };
    es.addEventListener("overflow", () => {
      // the daemon dropped this stream because the page fell behind: reconnect and refetch
      setLive("reconnecting");
      retryTimer = setTimeout(openEvents, 100);
    });
    es.onerror = () => {
      if (source !== es) return;
      setLive("reconnecting");
      if (es.readyState === EventSource.CLOSED) {
        // the browser gave up (an error status, not a dropped connection): check, then retry
        retryTimer = setTimeout(checkThenReconnect, backoff);
        backoff = Math.min(backoff * 2, 15000);
      }
    };
  }
  async function checkThenReconnect() {
    try {
      await api("GET", "/api/launchers");
      openEvents();
    } catch (err) {
      if (state.loggedOut) return;
      retryTimer = setTimeout(checkThenReconnect, backoff);
      backoff = Math.min(backoff * 2, 15000);
    }
  }

  function onEvent(item) {
    switch (item.topic) {
      // a card opened or answered, a message settled: what an agent's messages wait for (its
      // "waiting" line, part of GET /api/agents) changed with it
      case "card":
        schedule("cards", 30);
        schedule("messages", 300);
        schedule("agents", 80);
        break;
      case "message":
      case "inbox":
        schedule("messages", 200);
        schedule("cards", 100);
        schedule("agents", 80);
        break;
      case "needs":
        schedule("needs", 30);
        break;
      case "act":
        schedule("acts", 30);
        schedule("audit", 700);
        break;
      case "pairing":
        schedule("pairing", 30);
        break;
      case "grant":
        schedule("agents", 80);
        break;
      case "pane":
        schedule("agents", 400);
        break;
      case "audit":
        schedule("audit", 700);
        break;
      case "restart":
        onRestart(item);
        break;
      default:
        break;
    }
  }

  // --- wiring -------------------------------------------------------------------------------------

  function start() {
    $("disconnect-all").addEventListener("click", disconnectAll);
    $("start-control").addEventListener("click", () => openStartControl().catch(reportError));
    $("start-control-form").addEventListener("submit", startControl);
    $("start-control-cancel").addEventListener("click", () => $("start-control-dialog").close());
    $("msg-pane").addEventListener("change", () => loadMessages().catch(reportError));
    $("audit-filters").addEventListener("submit", (ev) => {
      ev.preventDefault();
      loadAudit("newest").catch(reportError);
    });
    $("audit-filters").addEventListener("reset", () => setTimeout(() => loadAudit("newest").catch(reportError), 0));
    $("audit-pane").addEventListener("change", () => loadAudit("newest").catch(reportError));
    $("audit-time").addEventListener("change", () => loadAudit("newest").catch(reportError));
    $("audit-newest").addEventListener("click", () => loadAudit("newest").catch(reportError));
    for (const where of ["newer", "older"]) {
      $(`audit-${where}`).addEventListener("click", () => {
        state.audit.newest = false; // stop live refreshes from jumping back to the newest page
        loadAudit(where).catch(reportError);
      });
    }
    $("logout").addEventListener("click", async () => {
      try {
        await api("POST", "/logout", {});
      } catch (err) {
        reportError(err);
      }
      showLoggedOut("You logged out.");
    });
    loadSessions().catch(reportError);
    setInterval(tick, 1000);
    // the paired boxes' lists change without an event here (and age): looked at again every 15 s
    setInterval(() => state.federated && schedule("remote", 0), 15000);
    setLive("connecting");
    openEvents();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

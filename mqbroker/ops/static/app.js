// mqbroker console: one page, hash routes (#/topics/NAME), everything through the admin API (/api/v1).
// Untrusted text (topic names, record values) only ever goes into textContent, never into HTML.
"use strict";

const REFRESH_MS = 2000;
let generation = 0;  // the latest route; an older page still loading is dropped when it finishes

// -- DOM and API helpers ---------------------------------------------------------------------------

function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "className") element.className = value;
    else element.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

async function api(method, path, body) {
  const options = {method, credentials: "same-origin", headers: {accept: "application/json"}};
  if (body !== undefined) {
    options.headers["content-type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch("/api/v1" + path, options);
  if (response.status === 204) return null;
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error ? answer.error.message : `HTTP ${response.status}`);
  return answer;
}

function say(message, error = false) {
  const line = h("div", {className: error ? "error" : ""}, message);
  document.getElementById("status").append(line);
  setTimeout(() => line.remove(), error ? 8000 : 4000);
}

// Run action now and every few seconds while page (the page's container) is shown; it stops by itself after.
function every(page, milliseconds, action) {
  const run = () => Promise.resolve(action()).catch((error) => page.isConnected && say(error.message, true));
  run();
  const timer = setInterval(() => (page.isConnected ? run() : clearInterval(timer)), milliseconds);
}

function table(caption, headers, rows, emptyText = "none") {
  if (rows.length === 0) return h("p", {className: "empty"}, `${caption}: ${emptyText}`);
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headers.map(([label, numeric]) =>
      h("th", {scope: "col", className: numeric ? "number" : ""}, label)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell, index) =>
      h("td", {className: headers[index][1] ? "number" : ""}, cell))))));
}

// A form field: its label (naming the input on its own) above the input.
function field(text, input) {
  return h("div", {className: "field"}, h("label", {for: input.id}, text), input);
}

function card(label, value, tone = "") {
  return h("div", {className: "card " + tone}, h("div", {className: "label"}, label), h("div", {className: "value"}, value));
}

function link(text, hash) { return h("a", {href: hash}, text); }
function encoded(name) { return encodeURIComponent(name); }
function bytes(value) { return value === null ? "–" : formatNumber(value) + (value < 1e3 ? " B" : "B"); }
function when(milliseconds) { return new Date(milliseconds).toLocaleString(); }

// A key or value as the browser shows it: pretty JSON, UTF-8 text, or a note for binary data.
function shown(text) {
  if (text === null) return h("span", {className: "empty"}, "null");
  if (text.text === null) return h("span", {className: "binary"}, `binary, base64 ${text.base64}`);
  let body = text.text;
  try {
    const parsed = JSON.parse(body);
    if (typeof parsed === "object" && parsed !== null) body = JSON.stringify(parsed, null, 2);
  } catch (notJson) { /* plain text */ }
  return h("pre", {}, body + (text.truncated ? " …" : ""));
}

// -- pages -----------------------------------------------------------------------------------------

async function overview(main) {
  const cluster = await api("GET", "/cluster");
  document.getElementById("cluster-name").textContent = `cluster ${cluster.cluster_id} · broker ${cluster.node_id}`;
  const health = cluster.partitions;
  main.append(
    h("h1", {}, "Overview"),
    h("div", {className: "cards"},
      card("Brokers", cluster.brokers.length),
      card("Controller", cluster.controller_id || "none", cluster.controller_id ? "" : "bad"),
      card("Raft term", cluster.raft.term),
      card("Commit index", cluster.raft.commit_index),
      card("Topics", cluster.topics),
      card("Partitions", health.total),
      card("Under-replicated", health.under_replicated, health.under_replicated ? "bad" : "good"),
      card("Offline", health.offline, health.offline ? "bad" : "good")),
    h("h2", {}, "Brokers"),
    table("Brokers of the cluster", [["Node"], ["Address"], ["State"], ["Role"]], cluster.brokers.map((broker) => [
      String(broker.node_id) + (broker.this_broker ? " (this broker)" : ""), `${broker.host}:${broker.port}`,
      broker.state, [broker.controller ? "controller" : "", broker.voter ? "voter" : ""].filter(Boolean).join(", ")])),
    h("h2", {}, "Rates on this broker"));
  const charts = {
    produced: new LiveChart("Produced records per second", "records/s"),
    producedBytes: new LiveChart("Produced bytes per second", "B/s"),
    fetchedBytes: new LiveChart("Fetched bytes per second", "B/s"),
  };
  main.append(h("div", {className: "charts"}, Object.values(charts).map((chart) => chart.figure)));
  let last = null;
  every(main, REFRESH_MS, async () => {
    const counters = await api("GET", "/counters");
    if (last !== null) {
      const seconds = Math.max((counters.time_ms - last.time_ms) / 1000, 0.001);
      const time = counters.time_ms / 1000;
      charts.produced.add("produce", time, (counters.produced_records - last.produced_records) / seconds);
      charts.producedBytes.add("produce", time, (counters.produced_bytes - last.produced_bytes) / seconds);
      charts.fetchedBytes.add("fetch", time, (counters.fetched_bytes - last.fetched_bytes) / seconds);
    }
    last = counters;
  });
}

async function topics(main) {
  const name = h("input", {id: "new-topic-name", name: "name", required: true, autocomplete: "off"});
  const partitions = h("input", {id: "new-topic-partitions", name: "partitions", type: "number", min: 1, value: 1});
  const search = h("input", {id: "topic-search", type: "search", placeholder: "name contains…"});
  const internal = h("input", {id: "show-internal", type: "checkbox"});
  const list = h("div", {});
  async function load() {
    const found = await api("GET", "/topics" + (internal.checked ? "?internal=true" : ""));
    const wanted = search.value.trim().toLowerCase();
    const rows = found.filter((topic) => topic.name.toLowerCase().includes(wanted)).map((topic) => [
      link(topic.name, "#/topics/" + encoded(topic.name)), topic.partitions, topic.replication_factor,
      topic.under_replicated, topic.offline]);
    list.replaceChildren(table("Topics", [["Name"], ["Partitions", true], ["Replication", true],
                                          ["Under-replicated", true], ["Offline", true]], rows, "no topic matches"));
  }
  const form = h("form", {className: "inline", "aria-label": "Create a topic", onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api("POST", "/topics", {name: name.value.trim(), partitions: Number(partitions.value)});
      say(`Topic ${name.value.trim()} created`);
      name.value = "";
      await load();
    } catch (error) { say(error.message, true); }
  }},
    field("New topic name", name),
    field("Partitions", partitions),
    h("button", {type: "submit"}, "Create topic"));
  search.addEventListener("input", load);
  internal.addEventListener("change", load);
  main.append(h("h1", {}, "Topics"), form,
    h("div", {className: "toolbar"}, h("label", {for: "topic-search"}, "Search topics "), search,
      h("label", {className: "check", for: "show-internal"}, internal, " internal topics")), list);
  await load();
}

async function topic(main, name) {
  const described = await api("GET", "/topics/" + encoded(name));
  const remove = h("button", {type: "button", className: "danger", onclick: async () => {
    if (!window.confirm(`Delete topic ${name} and all its records?`)) return;
    try {
      await api("DELETE", "/topics/" + encoded(name));
      say(`Topic ${name} deleted`);
      location.hash = "#/topics";
    } catch (error) { say(error.message, true); }
  }}, "Delete topic");
  const partitionTable = h("div", {});
  async function loadPartitions() {
    const partitions = await api("GET", `/topics/${encoded(name)}/partitions`);
    partitionTable.replaceChildren(table("Partitions", [["Partition", true], ["Leader", true], ["Replicas"], ["ISR"],
      ["Earliest offset", true], ["Latest offset", true], ["Size here", true]], partitions.map((p) => [
      p.partition, p.leader < 0 ? "offline" : p.leader, p.replicas.join(", "), p.isr.join(", "),
      p.earliest_offset ?? "–", p.latest_offset ?? "–", bytes(p.size_bytes)])));
  }
  const actions = described.internal
    ? h("p", {className: "note"}, "An internal topic: it belongs to the broker. Clients may not create it or write " +
        "to it; only a super user may delete or alter it.")
    : h("div", {className: "toolbar"}, remove);
  main.append(h("h1", {}, `Topic ${name}`), actions, partitionTable,
    h("details", {}, h("summary", {}, "Configuration"), table("Effective configuration", [["Key"], ["Value"]],
      Object.entries(described.configs).map(([key, value]) => [key, value]))),
    h("h2", {}, "Messages"), browser(name, described.partitions.length));
  every(main, REFRESH_MS * 2, loadPartitions);
}

function browser(name, partitionCount) {
  const partition = h("select", {id: "browse-partition"}, h("option", {value: ""}, "all"),
    [...Array(partitionCount).keys()].map((number) => h("option", {value: number}, number)));
  const mode = h("select", {id: "browse-mode"}, h("option", {value: "recent"}, "most recent"),
    h("option", {value: "offset"}, "from offset"), h("option", {value: "time"}, "from time"));
  const offset = h("input", {id: "browse-offset", type: "number", min: 0, value: 0});
  const time = h("input", {id: "browse-time", type: "datetime-local"});
  const limit = h("input", {id: "browse-limit", type: "number", min: 1, max: 500, value: 50});
  const results = h("div", {"aria-live": "polite"});
  async function show(event) {
    if (event) event.preventDefault();
    const query = new URLSearchParams({limit: limit.value});
    if (partition.value !== "") query.set("partition", partition.value);
    if (mode.value === "offset") query.set("offset", offset.value);
    if (mode.value === "time" && time.value) query.set("timestamp_ms", String(new Date(time.value).getTime()));
    try {
      const page = await api("GET", `/topics/${encoded(name)}/records?${query}`);
      results.replaceChildren(table(`${page.records.length} record(s)`, [["Partition", true], ["Offset", true],
        ["Time"], ["Key"], ["Value"], ["Headers"]], page.records.map((record) => [
        record.partition, record.offset, when(record.timestamp_ms), shown(record.key), shown(record.value),
        record.headers.map((header) => `${header.key}=${header.value ? header.value.text ?? "(binary)" : "null"}`)
          .join(", ")]), "no records"),
        ...page.unreadable.map((batch) => h("p", {className: "note", role: "alert"}, `Partition ${batch.partition}, ` +
          `offsets ${batch.first_offset}–${batch.last_offset}: a batch that does not decode, passed over ` +
          `(${batch.error})`)));
    } catch (error) { say(error.message, true); }
  }
  const form = h("form", {className: "inline", "aria-label": "Browse messages", onsubmit: show},
    field("Partition", partition), field("Start", mode),
    field("Offset", offset), field("Time", time),
    field("Records", limit), h("button", {type: "submit"}, "Show messages"));
  show();
  return h("section", {"aria-label": "Message browser"}, form, results);
}

async function groups(main) {
  const found = await api("GET", "/groups");
  main.append(h("h1", {}, "Consumer groups"), table("Groups coordinated by this broker",
    [["Group"], ["State"], ["Protocol"]],
    found.map((group) => [link(group.group_id, "#/groups/" + encoded(group.group_id)), group.state,
                          group.protocol_type]), "no consumer group yet"));
}

async function group(main, groupId) {
  const heading = h("h1", {}, `Group ${groupId}`);
  const summary = h("div", {className: "cards"});
  const members = h("div", {});
  const offsets = h("div", {});
  const chart = new LiveChart("Lag over time (records)", "records");
  main.append(heading, summary, h("h2", {}, "Lag"), h("div", {className: "charts"}, chart.figure),
    h("h2", {}, "Members"), members, h("h2", {}, "Committed offsets"), offsets);
  every(main, REFRESH_MS, async () => {
    const described = await api("GET", "/groups/" + encoded(groupId));
    summary.replaceChildren(card("State", described.state), card("Members", described.members.length),
      card("Generation", described.generation_id), card("Total lag", described.total_lag,
                                                        described.total_lag ? "bad" : "good"));
    chart.add("total", Date.now() / 1000, described.total_lag);
    members.replaceChildren(table("Members", [["Member"], ["Client"], ["Host"], ["Assigned partitions"]],
      described.members.map((member) => [member.member_id, member.client_id, member.client_host,
        member.assignment.map((p) => `${p.topic}-${p.partition}`).join(", ")]), "no active member"));
    offsets.replaceChildren(table("Committed offsets and lag", [["Topic"], ["Partition", true],
      ["Committed", true], ["Latest", true], ["Lag", true]], described.offsets.map((o) => [
      o.topic, o.partition, o.committed_offset, o.latest_offset ?? "–", o.lag ?? "–"])));
  });
}

async function mqtt(main) {
  const [clients, sessions, retained] = await Promise.all(
    [api("GET", "/mqtt/clients"), api("GET", "/mqtt/sessions"), api("GET", "/mqtt/retained?limit=200")]);
  const filters = (subscriptions) => subscriptions.map((s) => `${s.topic_filter} (QoS ${s.qos})`).join(", ");
  main.append(h("h1", {}, "MQTT"),
    table("Clients connected to this broker", [["Client id"], ["Principal"], ["Address"], ["Version"],
      ["Subscriptions"], ["In flight", true]], clients.map((c) => [c.client_id, c.principal, c.peer,
      c.protocol_level === 5 ? "5.0" : "3.1.1", filters(c.subscriptions), c.inflight])),
    table("Sessions", [["Client id"], ["Connected"], ["Expiry (s)", true], ["Ended"], ["Subscriptions"]],
      sessions.map((s) => [s.client_id, s.connected ? "yes" : "no", s.expiry_interval_s,
                           s.ended_at_ms ? when(s.ended_at_ms) : "–", filters(s.subscriptions)])),
    table("Retained messages", [["Topic"], ["QoS", true], ["Payload"], ["Since"]],
      retained.map((m) => [m.topic, m.qos, shown(m.payload), when(m.created_ms)])));
}

async function amqp(main) {
  const [queues, exchanges, bindings] = await Promise.all(
    [api("GET", "/amqp/queues"), api("GET", "/amqp/exchanges"), api("GET", "/amqp/bindings")]);
  main.append(h("h1", {}, "AMQP (vhost /)"),
    table("Queues", [["Queue"], ["Type"], ["Messages", true], ["Unacknowledged", true], ["Consumers", true],
      ["Durable"]], queues.map((q) => [q.name, q.type, q.messages ?? "–", q.unacknowledged ?? "–", q.consumers,
      q.durable ? "yes" : "no"])),
    table("Exchanges", [["Exchange"], ["Type"], ["Durable"], ["Internal"]],
      exchanges.map((e) => [e.name, e.type, e.durable ? "yes" : "no", e.internal ? "yes" : "no"])),
    table("Bindings", [["From exchange"], ["To"], ["Routing key"]],
      bindings.map((b) => [b.source, `${b.destination_type} ${b.destination}`, b.routing_key])));
}

async function security(main) {
  const [users, acls] = await Promise.all([api("GET", "/users"), api("GET", "/acls")]);
  const userName = h("input", {id: "new-user-name", required: true, autocomplete: "off"});
  const password = h("input", {id: "new-user-password", type: "password", required: true, autocomplete: "new-password"});
  const addUser = h("form", {className: "inline", "aria-label": "Add a user", onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api("POST", "/users", {name: userName.value.trim(), password: password.value});
      say(`User ${userName.value.trim()} added`);
      route();
    } catch (error) { say(error.message, true); }
  }}, field("User name", userName),
    field("Password", password), h("button", {type: "submit"}, "Add user"));
  const removeUser = (name) => h("button", {type: "button", className: "secondary", "aria-label": `Delete user ${name}`,
    onclick: async () => {
      if (!window.confirm(`Delete user ${name}?`)) return;
      try { await api("DELETE", "/users/" + encoded(name)); say(`User ${name} deleted`); route(); }
      catch (error) { say(error.message, true); }
    }}, "Delete");
  const removeAcl = (acl) => h("button", {type: "button", className: "secondary",
    "aria-label": `Delete ACL ${acl.permission} ${acl.principal} ${acl.operation} ${acl.resource_name}`,
    onclick: async () => {
      try { await api("DELETE", "/acls?" + new URLSearchParams(acl)); say("ACL deleted"); route(); }
      catch (error) { say(error.message, true); }
    }}, "Delete");
  main.append(h("h1", {}, "Users and ACLs"), h("h2", {}, "Users (SCRAM)"), addUser,
    table("Users", [["Name"], ["Action"]], users.map((user) => [user.name, removeUser(user.name)])),
    h("h2", {}, "ACLs"), await aclForm(),
    table("ACLs", [["Permission"], ["Principal"], ["Host"], ["Operation"], ["Resource"], ["Pattern"], ["Action"]],
      acls.map((acl) => [acl.permission, acl.principal, acl.host, acl.operation,
        `${acl.resource_type} ${acl.resource_name}`, acl.pattern_type, removeAcl(acl)])));
}

// The form adding one ACL; its choices are the Acl schema's enums in the API's own document.
async function aclForm() {
  const described = await (await fetch("/api/openapi.json", {credentials: "same-origin"})).json();
  const fields = described.components.schemas.Acl.properties;
  const choice = (id, name, chosen) => h("select", {id, name}, fields[name].enum.map((value) =>
    h("option", {value, selected: value === chosen}, value)));
  const inputs = {
    permission: choice("acl-permission", "permission", "allow"),
    principal: h("input", {id: "acl-principal", name: "principal", required: true, value: "User:", autocomplete: "off"}),
    operation: choice("acl-operation", "operation", "read"),
    resource_type: choice("acl-resource-type", "resource_type", "topic"),
    resource_name: h("input", {id: "acl-resource-name", name: "resource_name", required: true, autocomplete: "off",
                               placeholder: "orders"}),
    pattern_type: choice("acl-pattern", "pattern_type", "literal"),
    host: h("input", {id: "acl-host", name: "host", required: true, value: "*", autocomplete: "off"}),
  };
  // An MQTT topic ACL names a topic filter (+, #; %c client id, %u user name), always literal.
  inputs.resource_type.addEventListener("change", () => {
    const mqttTopic = inputs.resource_type.value === "mqtt_topic";
    inputs.resource_name.placeholder = mqttTopic ? "devices/%c/#" : "orders";
    if (mqttTopic) inputs.pattern_type.value = "literal";
    inputs.pattern_type.disabled = mqttTopic;
  });
  return h("form", {className: "inline", "aria-label": "Add an ACL", onsubmit: async (event) => {
    event.preventDefault();
    const acl = Object.fromEntries(Object.entries(inputs).map(([key, input]) => [key, input.value.trim()]));
    try {
      await api("POST", "/acls", {acls: [acl]});
      say(`ACL added: ${acl.permission} ${acl.principal} ${acl.operation} ${acl.resource_type} ${acl.resource_name}`);
      route();
    } catch (error) { say(error.message, true); }
  }}, field("Permission", inputs.permission), field("Principal", inputs.principal),
    field("Operation", inputs.operation), field("Resource type", inputs.resource_type),
    field("Resource name", inputs.resource_name), field("Pattern", inputs.pattern_type),
    field("Host", inputs.host), h("button", {type: "submit"}, "Add ACL"));
}

async function configuration(main) {
  const settings = await api("GET", "/configuration");
  const search = h("input", {id: "config-search", type: "search", placeholder: "key contains…"});
  const list = h("div", {});
  const show = () => list.replaceChildren(table("Settings of this broker", [["Key"], ["Value"]],
    Object.entries(settings).filter(([key]) => key.includes(search.value.trim()))
      .map(([key, value]) => [key, typeof value === "object" ? JSON.stringify(value) : String(value)])));
  search.addEventListener("input", show);
  main.append(h("h1", {}, "Configuration"), h("div", {className: "toolbar"},
    h("label", {for: "config-search"}, "Search settings "), search), list);
  show();
}

// -- routing ---------------------------------------------------------------------------------------

// Pages by the hash's first part; DETAILS: the page of one item (#/topics/NAME). pipelines.js adds its own.
const PAGES = {overview, topics, groups, mqtt, amqp, security, configuration};
const DETAILS = {topics: topic, groups: group};

async function route() {
  const mine = ++generation;
  const [page, ...rest] = (location.hash.replace(/^#\/?/, "") || "overview").split("/");
  const argument = rest.length ? decodeURIComponent(rest.join("/")) : null;
  for (const navigation of document.querySelectorAll("nav a")) {
    if (navigation.dataset.page === page) navigation.setAttribute("aria-current", "page");
    else navigation.removeAttribute("aria-current");
  }
  const render = argument && DETAILS[page] ? (m) => DETAILS[page](m, argument) : PAGES[page] || overview;
  const content = h("div", {});
  try {
    await render(content);
  } catch (error) {
    content.replaceChildren(h("h1", {}, "Cannot show this page"), h("p", {role: "alert"}, error.message));
  }
  if (mine !== generation) return;  // the user moved on meanwhile
  const main = document.getElementById("main");
  main.replaceChildren(content);
  const heading = main.querySelector("h1");
  document.title = `${heading ? heading.textContent : "mqbroker"} · mqbroker console`;
  main.focus();
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);

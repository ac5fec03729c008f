// mqbroker console: share groups, push subscriptions and connectors (loaded after app.js, whose helpers it uses).
// Untrusted text (names, endpoints, errors) only ever goes into textContent, never into HTML.
"use strict";

// A button that runs action (after confirm, when given) and reports its outcome.
function actionButton(text, label, action, {confirm = null, className = "secondary"} = {}) {
  return h("button", {type: "button", className, "aria-label": label, onclick: async () => {
    if (confirm && !window.confirm(confirm)) return;
    try { say(await action()); } catch (error) { say(error.message, true); }
  }}, text);
}

function names(text) { return text.split(",").map((name) => name.trim()).filter(Boolean); }

// -- share groups ----------------------------------------------------------------------------------

async function shareGroups(main) {
  const groupId = h("input", {id: "new-share-group", required: true, autocomplete: "off"});
  const topicNames = h("input", {id: "new-share-group-topics", required: true, autocomplete: "off",
                                 placeholder: "jobs, retries"});
  const start = h("select", {id: "new-share-group-start"}, h("option", {value: "latest"}, "latest"),
    h("option", {value: "earliest"}, "earliest"));
  const list = h("div", {});
  async function load() {
    const found = await api("GET", "/share-groups");
    list.replaceChildren(table("Share groups of the cluster", [["Group"], ["Topics"], ["Members", true],
      ["Push endpoint"]], found.map((group) => [link(group.group_id, "#/share-groups/" + encoded(group.group_id)),
      group.topics.join(", "), group.members, group.push_endpoint ?? "–"]), "no share group yet"));
  }
  const form = h("form", {className: "inline", "aria-label": "Create a share group", onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api("POST", "/share-groups", {group_id: groupId.value.trim(), topics: names(topicNames.value),
                                          configs: {"auto.offset.reset": start.value}});
      say(`Share group ${groupId.value.trim()} created`);
      groupId.value = "";
      await load();
    } catch (error) { say(error.message, true); }
  }}, field("New share group", groupId), field("Topics (comma-separated)", topicNames),
    field("Start from", start), h("button", {type: "submit"}, "Create share group"));
  main.append(h("h1", {}, "Share groups"), form, list);
  every(main, REFRESH_MS, load);
}

async function shareGroup(main, groupId) {
  const summary = h("div", {className: "cards"});
  const partitions = h("div", {});
  const members = h("div", {});
  const configs = h("div", {});
  const chart = new LiveChart("In flight and lag over time (records)", "records");
  const remove = actionButton("Delete share group", `Delete share group ${groupId}`, async () => {
    await api("DELETE", "/share-groups/" + encoded(groupId));
    location.hash = "#/share-groups";
    return `Share group ${groupId} deleted`;
  }, {confirm: `Delete share group ${groupId} and its state?`, className: "danger"});
  main.append(h("h1", {}, `Share group ${groupId}`), h("div", {className: "toolbar"}, remove), summary,
    h("div", {className: "charts"}, chart.figure), h("h2", {}, "Partitions"), partitions,
    h("h2", {}, "Members"), members, h("details", {}, h("summary", {}, "Configuration"), configs));
  every(main, REFRESH_MS, async () => {
    const group = await api("GET", "/share-groups/" + encoded(groupId));
    summary.replaceChildren(card("Members", group.members.length), card("In flight", group.in_flight),
      card("Lag", group.lag, group.lag ? "bad" : "good"),
      card("Dead-lettered", group.dead_lettered, group.dead_lettered ? "bad" : "good"),
      card("Dead-letter depth", group.dead_letter_depth ?? "no topic"));
    const now = Date.now() / 1000;
    chart.add("in flight", now, group.in_flight);
    chart.add("lag", now, group.lag);
    partitions.replaceChildren(table("Share partitions", [["Topic"], ["Partition", true], ["Start", true],
      ["End", true], ["In flight", true], ["Available", true], ["Due", true], ["Scheduled", true], ["Lag", true],
      ["Deliveries (count × records)"]], group.partitions.map((p) => [p.topic, p.partition, p.start_offset,
      p.end_offset, p.in_flight, p.available, p.due, p.scheduled, p.lag,
      Object.entries(p.delivery_counts).map(([count, records]) => `${count}× ${records}`).join(", ") || "–"])));
    members.replaceChildren(table("Members", [["Member"], ["Client"], ["Host"], ["Topics"], ["Acquired", true]],
      group.members.map((m) => [m.member_id, m.client_id, m.client_host, m.topics.join(", "), m.acquired]),
      "no member"));
    configs.replaceChildren(table("Share group configuration", [["Key"], ["Value"]],
      Object.entries(group.configs), "defaults only"));
  });
}

// -- push subscriptions ----------------------------------------------------------------------------

async function subscriptions(main) {
  const inputs = {
    name: h("input", {id: "new-subscription-name", required: true, autocomplete: "off"}),
    topic: h("input", {id: "new-subscription-topic", required: true, autocomplete: "off"}),
    endpoint: h("input", {id: "new-subscription-endpoint", type: "url", required: true, autocomplete: "off",
                          placeholder: "https://hooks.example.com/orders"}),
    filter: h("input", {id: "new-subscription-filter", autocomplete: "off", placeholder: 'header.type = "paid"'}),
  };
  const secret = h("div", {"aria-live": "polite"});
  const list = h("div", {});
  async function load() {
    const found = await api("GET", "/subscriptions");
    list.replaceChildren(table("Push subscriptions", [["Name"], ["Topics"], ["Endpoint"], ["Action"]],
      found.map((s) => [link(s.name, "#/share-groups/" + encoded(s.name)), s.topics.join(", "), s.endpoint,
        actionButton("Delete", `Delete push subscription ${s.name}`, async () => {
          await api("DELETE", "/subscriptions/" + encoded(s.name));
          await load();
          return `Push subscription ${s.name} deleted`;
        }, {confirm: `Delete push subscription ${s.name}?`})]), "no push subscription yet"));
  }
  const form = h("form", {className: "inline", "aria-label": "Create a push subscription", onsubmit: async (event) => {
    event.preventDefault();
    const body = {name: inputs.name.value.trim(), topic: inputs.topic.value.trim(), endpoint: inputs.endpoint.value.trim()};
    if (inputs.filter.value.trim()) body.filter = inputs.filter.value.trim();
    try {
      const created = await api("POST", "/subscriptions", body);
      secret.replaceChildren(h("p", {className: "note"}, `Signing secret of ${created.name} (X-MQ-Signature, ` +
        "HMAC-SHA256), shown only now: ", h("code", {}, created.secret)));
      say(`Push subscription ${created.name} created`);
      await load();
    } catch (error) { say(error.message, true); }
  }}, field("Name", inputs.name), field("Topic", inputs.topic), field("Endpoint URL", inputs.endpoint),
    field("Filter (optional)", inputs.filter), h("button", {type: "submit"}, "Create subscription"));
  main.append(h("h1", {}, "Push subscriptions"), form, secret, list);
  await load();
}

// -- connectors ------------------------------------------------------------------------------------

// "key=value" lines (blank lines and # comments skipped) as a configuration object.
function settings(text) {
  const config = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"))) {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`"${line}" is not key=value`);
    config[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return config;
}

function lag(connector) {
  return connector.lag_records === null ? "unknown" : `${connector.lag_records} (${connector.lag_seconds.toFixed(1)} s)`;
}

// Pause or resume a connector, then call done.
function stateButton(connector, done) {
  const pause = connector.state === "running";
  return actionButton(pause ? "Pause" : "Resume", `${pause ? "Pause" : "Resume"} connector ${connector.name}`,
    async () => {
      await api("PUT", `/connectors/${encoded(connector.name)}/state`, {state: pause ? "paused" : "running"});
      await done();
      return `Connector ${connector.name} ${pause ? "paused" : "resumed"}`;
    });
}

async function connectors(main) {
  const name = h("input", {id: "new-connector-name", required: true, autocomplete: "off"});
  const type = h("select", {id: "new-connector-type"}, ["redis-sink", "redis-source", "mirror"].map((value) =>
    h("option", {value}, value)));
  const config = h("textarea", {id: "new-connector-config", rows: 3, cols: 40,
                                placeholder: "topics=orders\nredis.url=redis://cache:6379/0"});
  const list = h("div", {});
  async function load() {
    const found = await api("GET", "/connectors");
    list.replaceChildren(table("Connectors", [["Name"], ["Type"], ["State"], ["Tasks running", true],
      ["Failed", true], ["Lag (records, oldest)"], ["Errors", true], ["Actions"]], found.map((c) => [
      link(c.name, "#/connectors/" + encoded(c.name)), c.type, c.state, `${c.running_tasks} of ${c.tasks}`,
      c.failed_tasks, lag(c), c.errors_total, h("span", {className: "toolbar"}, stateButton(c, load),
        actionButton("Delete", `Delete connector ${c.name}`, async () => {
          await api("DELETE", "/connectors/" + encoded(c.name));
          await load();
          return `Connector ${c.name} deleted`;
        }, {confirm: `Delete connector ${c.name} with its progress?`}))]), "no connector yet"));
  }
  const form = h("form", {className: "inline", "aria-label": "Create a connector", onsubmit: async (event) => {
    event.preventDefault();
    try {
      await api("POST", "/connectors", {name: name.value.trim(), config: {type: type.value, ...settings(config.value)}});
      say(`Connector ${name.value.trim()} created`);
      name.value = "";
      await load();
    } catch (error) { say(error.message, true); }
  }}, field("New connector", name), field("Type", type), field("Settings (key=value per line)", config),
    h("button", {type: "submit"}, "Create connector"));
  main.append(h("h1", {}, "Connectors"), form, list);
  every(main, REFRESH_MS, load);
}

async function connector(main, connectorName) {
  const summary = h("div", {className: "cards"});
  const actions = h("div", {className: "toolbar"});
  const tasks = h("div", {});
  const config = h("div", {});
  async function load() {
    const found = await api("GET", "/connectors/" + encoded(connectorName));
    summary.replaceChildren(card("Type", found.type), card("State", found.state),
      card("Tasks", found.tasks.length), card("Lag", lag(found), found.lag_records ? "bad" : "good"));
    actions.replaceChildren(stateButton(found, load), actionButton("Delete connector",
      `Delete connector ${connectorName}`, async () => {
        await api("DELETE", "/connectors/" + encoded(connectorName));
        location.hash = "#/connectors";
        return `Connector ${connectorName} deleted`;
      }, {confirm: `Delete connector ${connectorName} with its progress?`, className: "danger"}));
    tasks.replaceChildren(table("Tasks", [["Task", true], ["State"], ["Broker", true], ["Records", true],
      ["Records/s", true], ["Lag (records)", true], ["Lag (s)", true], ["Errors", true], ["Last error"]],
      found.tasks.map((t) => [t.task, t.state, t.owner, t.records_total, t.records_per_second.toFixed(1),
        t.lag_records < 0 ? "unknown" : t.lag_records, t.lag_seconds.toFixed(1), t.errors_total,
        t.last_error ?? "–"])));
    config.replaceChildren(table("Connector configuration (credentials masked)", [["Key"], ["Value"]],
      Object.entries(found.config)));
  }
  main.append(h("h1", {}, `Connector ${connectorName}`), actions, summary, h("h2", {}, "Tasks"), tasks,
    h("h2", {}, "Configuration"), config);
  every(main, REFRESH_MS, load);
}

Object.assign(PAGES, {"share-groups": shareGroups, subscriptions, connectors});
Object.assign(DETAILS, {"share-groups": shareGroup, connectors: connector});

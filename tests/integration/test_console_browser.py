"""The web console in a real browser: Debian's chromium, headless, driven by Playwright, against a real broker.

A topic is created from the console, filled with the CLI, its messages and a group's lag are
seen updating, and it is deleted from the console; a share group, a push subscription and a Redis
sink connector are created, watched and deleted there; the console is used with the keyboard
alone; inputs have labels, tables captions, text enough contrast. Each page is photographed
at a laptop's size: into the test's directory, or into ``docs/images/`` (the README shows them)
with ``MQBROKER_UPDATE_SCREENSHOTS=1``.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import paho.mqtt.client as mqtt
import pika
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from mqbroker.client import Producer, ShareConsumer
from tests.integration.brokerprocess import running
from tests.integration.mqtt_support import Client as MqttClient
from tests.integration.mqtt_support import MqttBroker
from tests.integration.redisprocess import RedisProcess, running_redis

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LAPTOP_VIEWPORT = {"width": 1366, "height": 800}
REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from mqbroker.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MqttBroker]:
    """One broker for the module, all listeners on."""
    yield from running(MqttBroker(data_dir=tmp_path_factory.mktemp("console") / "data"))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, broker: MqttBroker) -> Iterator[Page]:
    """A page of a fresh headless chromium profile, at the broker's console."""
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_FLAGS, viewport=LAPTOP_VIEWPORT)
        context.set_default_timeout(20_000)
        opened = context.new_page()
        errors: list[str] = []
        opened.on("pageerror", lambda error: errors.append(str(error)))
        opened.goto(f"http://127.0.0.1:{broker.ports['http']}/#/overview")
        yield opened
        context.close()
        assert not errors, f"the console raised: {errors}"


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Where the pages' pictures go."""
    if os.environ.get("MQBROKER_UPDATE_SCREENSHOTS") == "1":
        return REPOSITORY / "docs" / "images"
    return tmp_path_factory.mktemp("screenshots")


def _cli(broker: MqttBroker, *arguments: str, lines: str = "") -> str:
    done = subprocess.run([*CLI, *arguments, "--bootstrap", broker.bootstrap], input=lines, capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stdout + done.stderr


def _open(page: Page, hash_route: str, heading: str) -> None:
    page.goto(page.url.split("#")[0] + hash_route)
    expect(page.get_by_role("heading", level=1)).to_have_text(heading)


def test_create_a_topic_see_messages_and_lag_then_delete_it(page: Page, broker: MqttBroker,
                                                           screenshots: pathlib.Path) -> None:
    _open(page, "#/topics", "Topics")
    page.get_by_label("New topic name", exact=True).fill("clicks")
    page.get_by_label("Partitions", exact=True).fill("2")
    page.get_by_role("button", name="Create topic").click()
    expect(page.get_by_role("link", name="clicks", exact=True)).to_be_visible()
    page.get_by_label("Search topics", exact=True).fill("click")
    expect(page.get_by_role("row")).to_have_count(2)  # the header and clicks
    page.screenshot(path=str(screenshots / "console-topics.png"))

    events = [json.dumps({"page": f"/p/{n}", "user": n % 3}) for n in range(10)]
    assert "produced 10" in _cli(broker, "produce", "clicks", "--partition", "1", lines="\n".join(events) + "\n")
    page.get_by_role("link", name="clicks", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Topic clicks")
    page.get_by_role("button", name="Show messages").click()
    expect(page.get_by_text("10 record(s)")).to_be_visible()
    expect(page.locator("td pre").filter(has_text='"page": "/p/9"')).to_be_visible()  # JSON, pretty-printed
    page.get_by_label("Start", exact=True).select_option("offset")
    page.get_by_label("Offset", exact=True).fill("7")
    page.get_by_label("Partition", exact=True).select_option("1")
    page.get_by_role("button", name="Show messages").click()
    expect(page.get_by_text("3 record(s)")).to_be_visible()
    page.get_by_label("Start", exact=True).select_option("recent")
    page.get_by_label("Partition", exact=True).select_option("")
    page.get_by_role("button", name="Show messages").click()
    page.screenshot(path=str(screenshots / "console-topic.png"), full_page=False)

    _cli(broker, "consume", "clicks", "--group", "clicks-report", "--from-beginning", "--max-messages", "4",
         "--timeout-ms", "20000")
    _open(page, "#/groups/clicks-report", "Group clicks-report")
    total = page.locator(".card").filter(has_text="Total lag").locator(".value")
    expect(total).to_have_text("6")
    _cli(broker, "produce", "clicks", "--partition", "1", lines="x\n" * 5)
    expect(total).to_have_text("11")  # the page polls: the lag grows on its own
    expect(page.get_by_role("img", name="Lag over time (records)")).to_be_visible()
    page.screenshot(path=str(screenshots / "console-group.png"))

    _open(page, "#/topics/clicks", "Topic clicks")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete topic").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Topics")
    expect(page.get_by_role("status")).to_contain_text("Topic clicks deleted")
    expect(page.get_by_role("link", name="clicks", exact=True)).to_have_count(0)


def test_the_console_works_from_the_keyboard(page: Page) -> None:
    _open(page, "#/overview", "Overview")
    page.locator("body").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    page.locator("body").focus()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")  # skip link, Overview, Topics
    assert page.evaluate("document.activeElement.textContent") == "Topics"
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("Topics")
    assert page.evaluate("document.activeElement.id") == "main"  # focus moved to the new page's content
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "new-topic-name"
    page.keyboard.type("typed")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Create topic"
    page.keyboard.press("Enter")
    expect(page.get_by_role("link", name="typed", exact=True)).to_be_visible()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"  # focus is visible


CONTRAST = """() => {
  const channel = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  const luminance = (rgb) => { const [r, g, b] = rgb.match(/\\d+/g).map(Number);
                               return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b); };
  const background = (element) => { for (let e = element; e; e = e.parentElement) {
      const color = getComputedStyle(e).backgroundColor;
      if (color !== "rgba(0, 0, 0, 0)" && color !== "transparent") return color; }
    return "rgb(255, 255, 255)"; };
  const worst = [];
  for (const element of document.querySelectorAll("h1, h2, th, td, a, button, label, caption, .card, nav a")) {
    if (!element.offsetParent || !element.textContent.trim()) continue;
    const [a, b] = [luminance(getComputedStyle(element).color), luminance(background(element))];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) worst.push(`${element.tagName} "${element.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}`);
  }
  return worst;
}"""
UNLABELLED = """() => [...document.querySelectorAll("input, select")]
  .filter((element) => element.labels.length === 0 && !element.getAttribute("aria-label")).map((e) => e.outerHTML)"""


def _seed_every_page(broker: MqttBroker) -> MqttClient:
    with Producer(broker.bootstrap, acks="all") as producer:
        for n in range(50):
            producer.send("orders", value=json.dumps({"order": n, "total": n * 1.5}).encode(), key=b"customer-%d" % n)
    _cli(broker, "consume", "orders", "--group", "invoicing", "--from-beginning", "--max-messages", "20",
         "--timeout-ms", "20000")
    device = MqttClient(broker, "thermostat-1", version=mqtt.MQTTv5, clean=False, session_expiry_s=600)
    device.subscribe("home/thermostat-1/set", qos=1)
    device.publish("home/thermostat-1/state", b'{"celsius": 21.5}', qos=1, retain=True)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"]))
    channel = connection.channel()
    channel.exchange_declare("billing", exchange_type="direct", durable=True)
    channel.queue_declare("invoices", durable=True)
    channel.queue_bind("invoices", "billing", routing_key="invoice")
    channel.basic_publish("billing", "invoice", b"invoice #1")
    connection.close()
    _cli(broker, "users", "add", "operator", "--password", "operator-secret")
    _cli(broker, "acls", "add", "--allow", "User:operator", "--operation", "read", "--topic", "orders", "--prefixed")
    return device


def test_every_page_is_labelled_legible_and_photographed(page: Page, broker: MqttBroker,
                                                         screenshots: pathlib.Path) -> None:
    device = _seed_every_page(broker)
    traffic = threading.Event()

    def produce_until_stopped() -> None:
        with Producer(broker.bootstrap, acks=1, linger_ms=5) as producer:
            while not traffic.is_set():
                for n in range(200):
                    producer.send("orders", value=b"x" * 200, key=b"k%d" % n)
                producer.flush()
                time.sleep(0.1)

    producing = threading.Thread(target=produce_until_stopped, daemon=True)
    producing.start()
    try:
        pages = [("#/overview", "Overview", "console-overview.png"), ("#/topics/orders", "Topic orders", None),
                 ("#/groups", "Consumer groups", "console-groups.png"), ("#/groups/invoicing", "Group invoicing", None),
                 ("#/share-groups", "Share groups", None), ("#/subscriptions", "Push subscriptions", None),
                 ("#/connectors", "Connectors", None),
                 ("#/mqtt", "MQTT", "console-mqtt.png"), ("#/amqp", "AMQP (vhost /)", "console-amqp.png"),
                 ("#/security", "Users and ACLs", "console-security.png"),
                 ("#/configuration", "Configuration", "console-configuration.png")]
        for hash_route, heading, picture in pages:
            _open(page, hash_route, heading)
            page.wait_for_load_state("networkidle")
            assert page.evaluate(UNLABELLED) == [], hash_route
            assert page.evaluate(CONTRAST) == [], hash_route
            assert page.locator("table:not(:has(caption))").count() == 0, hash_route
            if picture == "console-overview.png":
                expect(page.locator("figure.chart .now").first).to_contain_text("records/s")
                page.wait_for_timeout(6000)  # a few points of live rates
            if picture is not None:
                page.screenshot(path=str(screenshots / picture))
    finally:
        traffic.set()
        producing.join(timeout=30)
        device.paho.disconnect()
        device.paho.loop_stop()
    _open(page, "#/mqtt", "MQTT")
    expect(page.get_by_role("cell", name="home/thermostat-1/state")).to_be_visible()
    _open(page, "#/amqp", "AMQP (vhost /)")
    expect(page.get_by_role("cell", name="invoices", exact=True)).to_be_visible()
    _open(page, "#/security", "Users and ACLs")
    expect(page.get_by_role("button", name="Delete user operator")).to_be_visible()


def test_an_mqtt_topic_acl_added_in_the_console_is_the_clis_too_and_internal_topics_cannot_be_deleted(
        page: Page, broker: MqttBroker) -> None:
    """The ACL form offers what the API's document allows (mqtt_topic among the resource types; an MQTT topic
    filter is always literal); the ACL it adds is the one `mqbroker acls list` shows. An internal topic's page says
    whose it is and offers no delete."""
    def add_mqtt_topic_acl(topic_filter: str) -> None:
        page.get_by_label("Principal", exact=True).fill("User:*")
        page.get_by_label("Operation", exact=True).select_option("write")
        page.get_by_label("Resource type", exact=True).select_option("mqtt_topic")
        expect(page.get_by_label("Pattern", exact=True)).to_be_disabled()
        page.get_by_label("Resource name", exact=True).fill(topic_filter)
        page.get_by_role("button", name="Add ACL").click()

    _open(page, "#/security", "Users and ACLs")
    add_mqtt_topic_acl("devices/%c/#")
    expect(page.get_by_role("status")).to_contain_text("ACL added: allow User:* write mqtt_topic devices/%c/#")
    expect(page.get_by_role("cell", name="mqtt_topic devices/%c/#", exact=True)).to_be_visible()
    assert page.evaluate(UNLABELLED) == []
    listed = json.loads(_cli(broker, "acls", "list", "-o", "json"))["acls"]
    assert {"permission": "allow", "principal": "User:*", "operation": "write", "resource_type": "mqtt_topic",
            "resource_name": "devices/%c/#", "pattern_type": "literal", "host": "*"} in listed

    add_mqtt_topic_acl("devices/#/broken")
    expect(page.locator("#status .error")).to_contain_text("devices/#/broken")  # the broker's refusal, shown
    page.get_by_role("button", name="Delete ACL allow User:* write devices/%c/#").click()
    expect(page.get_by_role("cell", name="mqtt_topic devices/%c/#", exact=True)).to_have_count(0)
    assert "mqtt_topic" not in _cli(broker, "acls", "list", "-o", "json")

    _open(page, "#/topics/__consumer_offsets", "Topic __consumer_offsets")
    expect(page.get_by_text("An internal topic: it belongs to the broker.")).to_be_visible()
    expect(page.get_by_role("button", name="Delete topic")).to_have_count(0)


@pytest.fixture
def redis_server(tmp_path: pathlib.Path) -> Iterator[RedisProcess]:
    yield from running_redis(tmp_path / "redis")


def test_share_groups_subscriptions_and_connectors_from_the_console(
        page: Page, broker: MqttBroker, redis_server: RedisProcess, screenshots: pathlib.Path) -> None:
    """A share group created in the console shows a real consumer's leases; a push subscription created there
    shows its secret once and is deleted there; a Redis sink created there copies records, is paused and deleted."""
    _cli(broker, "topics", "create", "tickets", "--partitions", "2")
    _open(page, "#/share-groups", "Share groups")
    page.get_by_label("New share group", exact=True).fill("support")
    page.get_by_label("Topics (comma-separated)", exact=True).fill("tickets")
    page.get_by_label("Start from", exact=True).select_option("earliest")
    page.get_by_role("button", name="Create share group").click()
    expect(page.get_by_role("link", name="support", exact=True)).to_be_visible()
    _cli(broker, "produce", "tickets", lines="".join(f"ticket {n}\n" for n in range(8)))
    agent = ShareConsumer(broker.bootstrap, group_id="support", topics=["tickets"], client_id="agent-7",
                          records_max=3, fetch_wait_ms=200)
    try:
        held = []
        deadline = time.monotonic() + 20
        while not held and time.monotonic() < deadline:
            held = agent.poll(1.0)
        assert held, "the share consumer got no record"
        page.get_by_role("link", name="support", exact=True).click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Share group support")
        in_flight = page.locator(".card").filter(has_text="In flight").locator(".value")
        expect(in_flight).to_have_text(str(len(held)))
        expect(page.get_by_role("cell", name="agent-7", exact=True)).to_be_visible()
        agent.acknowledge(held)
        agent.commit()
        expect(in_flight).to_have_text("0")  # the page polls: the acknowledged records leave
        page.screenshot(path=str(screenshots / "console-share-group.png"))
    finally:
        agent.close()

    _open(page, "#/subscriptions", "Push subscriptions")
    page.get_by_label("Name", exact=True).fill("ticket-hook")
    page.get_by_label("Topic", exact=True).fill("tickets")
    page.get_by_label("Endpoint URL", exact=True).fill("http://127.0.0.1:9/hook")
    page.get_by_role("button", name="Create subscription").click()
    expect(page.get_by_text("shown only now")).to_be_visible()
    expect(page.get_by_role("cell", name="http://127.0.0.1:9/hook", exact=True)).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete push subscription ticket-hook").click()
    expect(page.get_by_text("no push subscription yet")).to_be_visible()

    _open(page, "#/connectors", "Connectors")
    page.get_by_label("New connector", exact=True).fill("tickets-to-redis")
    page.get_by_label("Type", exact=True).select_option("redis-sink")
    page.get_by_label("Settings (key=value per line)", exact=True).fill(
        f"topics=tickets\nredis.url={redis_server.url(0)}\nredis.stream=tickets")
    page.get_by_role("button", name="Create connector").click()
    expect(page.get_by_role("cell", name="1 of 1", exact=True)).to_be_visible(timeout=30_000)
    expect(page.get_by_role("cell", name="0 (0.0 s)", exact=True)).to_be_visible(timeout=30_000)
    assert redis_server.client(0).xlen("tickets") == 8
    page.screenshot(path=str(screenshots / "console-connectors.png"))
    page.get_by_role("button", name="Pause connector tickets-to-redis").click()
    expect(page.get_by_role("button", name="Resume connector tickets-to-redis")).to_be_visible()
    page.get_by_role("link", name="tickets-to-redis", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Connector tickets-to-redis")
    expect(page.get_by_role("cell", name="paused", exact=True)).to_be_visible(timeout=30_000)
    assert page.evaluate(UNLABELLED) == [] and page.evaluate(CONTRAST) == []
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete connector tickets-to-redis").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Connectors")
    expect(page.get_by_text("no connector yet")).to_be_visible()

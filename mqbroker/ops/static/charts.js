// Live line charts as inline SVG: a series of (time, value) points, the newest on the right.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const CHART_POINTS_MAX = 90;
const CHART_COLORS = ["#0b5cad", "#a4161a", "#1a6b34", "#6f42c1", "#b35c00"];

function svgElement(tag, attributes) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  return element;
}

function formatNumber(value) {
  const short = (scaled) => scaled.toFixed(1).replace(/\.0$/, "");
  if (value >= 1e9) return short(value / 1e9) + " G";
  if (value >= 1e6) return short(value / 1e6) + " M";
  if (value >= 1e3) return short(value / 1e3) + " k";
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

// The smallest of 1, 2, 2.5 and 5 times a power of ten that is at least value: the axis's top.
function niceCeiling(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 2.5, 5, 10].map((step) => step * power).find((top) => top >= value);
}

const PLOT_LEFT = 52;  // room for the axis labels ("250 k")

// A chart in a <figure>: call add(name, time, value) as values arrive; it redraws itself.
class LiveChart {
  constructor(title, unit) {
    this.unit = unit;
    this.series = new Map();
    this.figure = document.createElement("figure");
    this.figure.className = "chart";
    const caption = document.createElement("figcaption");
    caption.textContent = title;
    this.svg = svgElement("svg", {viewBox: "0 0 400 160", preserveAspectRatio: "none", role: "img"});
    this.svg.setAttribute("aria-label", title);
    this.now = document.createElement("p");
    this.now.className = "now";
    this.now.setAttribute("aria-live", "off");
    this.figure.append(caption, this.svg, this.now);
  }

  add(name, time, value) {
    if (!this.series.has(name)) this.series.set(name, []);
    const points = this.series.get(name);
    points.push([time, value]);
    if (points.length > CHART_POINTS_MAX) points.shift();
    this.draw();
  }

  draw() {
    const all = [...this.series.values()].flat();
    this.svg.replaceChildren();
    if (all.length === 0) return;
    const times = all.map(([time]) => time);
    const start = Math.min(...times);
    const span = Math.max(Math.max(...times) - start, 1);
    const top = niceCeiling(Math.max(...all.map(([, value]) => value), 1) * 1.05);
    for (const y of [0, 0.5, 1]) {
      this.svg.append(svgElement("line", {x1: PLOT_LEFT, x2: 400, y1: 150 - y * 140, y2: 150 - y * 140,
                                          stroke: "#c9d1db", "stroke-width": 1}));
      const label = svgElement("text", {x: PLOT_LEFT - 4, y: 154 - y * 140, "text-anchor": "end", "font-size": 11, fill: "#4a5360"});
      label.textContent = formatNumber(top * y);
      this.svg.append(label);
    }
    const summary = [];
    let index = 0;
    for (const [name, points] of this.series) {
      const color = CHART_COLORS[index++ % CHART_COLORS.length];
      const coordinates = points.map(([time, value]) =>
        `${(PLOT_LEFT + (time - start) / span * (400 - PLOT_LEFT)).toFixed(1)},${(150 - value / top * 140).toFixed(1)}`);
      this.svg.append(svgElement("polyline", {points: coordinates.join(" "), fill: "none", stroke: color,
                                              "stroke-width": 2, "vector-effect": "non-scaling-stroke"}));
      summary.push(`${name}: ${formatNumber(points[points.length - 1][1])} ${this.unit}`);
    }
    this.now.textContent = "now " + summary.join(" · ");
  }
}

window.LiveChart = LiveChart;
window.formatNumber = formatNumber;

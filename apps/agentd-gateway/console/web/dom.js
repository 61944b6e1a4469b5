// DOM building without HTML parsing. Every string from the API goes in through textContent or a
// checked attribute, never through innerHTML, so agent data cannot become markup or script.

const SVG_NS = 'http://www.w3.org/2000/svg';

// Attributes a caller may set. Event handlers ("on...") and "style" are never set from here:
// handlers are passed as functions under `on`, looks come from classes in style.css.
const SAFE_ATTR = /^(class|id|title|hidden|role|type|name|value|placeholder|for|colspan|rowspan|disabled|checked|selected|readonly|autocomplete|autofocus|rows|cols|min|max|step|spellcheck|tabindex|lang|dir|href|download|aria-[a-z-]+|data-[a-z0-9-]+|viewBox|width|height|x|y|x1|y1|x2|y2|cx|cy|r|rx|ry|d|points|transform|text-anchor|dominant-baseline|marker-end|preserveAspectRatio|refX|refY|markerWidth|markerHeight|orient|markerUnits)$/;

function set_attr(el, key, val) {
  if (val === undefined || val === null || val === false) return;
  if (!SAFE_ATTR.test(key)) throw new Error(`attribute not allowed: ${key}`);
  let s = val === true ? '' : String(val);
  // Links only go inside the console: a hash route or a same-origin path.
  if (key === 'href' && !(s.startsWith('#') || (s.startsWith('/') && !s.startsWith('//')))) s = '#';
  el.setAttribute(key, s);
}

function append_children(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append_children(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

function build(el, attrs, children) {
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (k === 'on') {
        for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      } else if (k === 'text') {
        el.textContent = v === undefined || v === null ? '' : String(v);
      } else if (k === 'testid') {
        set_attr(el, 'data-testid', v);
      } else {
        set_attr(el, k, v);
      }
    }
  }
  append_children(el, children);
  return el;
}

// h('div', {class: 'x', testid: 'y', on: {click: fn}}, 'text', child, [more]) -> HTMLElement.
// Strings become text nodes. attrs may be null.
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// The same for SVG elements.
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

// Replaces el's children with the given ones.
export function replace(el, ...children) {
  el.replaceChildren();
  append_children(el, children);
  return el;
}

// Calls fn after `ms` of quiet; each call restarts the wait.
export function debounce(fn, ms) {
  let t = 0;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}

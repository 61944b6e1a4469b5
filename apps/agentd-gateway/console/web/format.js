// Number, size, duration and time formatting for the console's tables and charts.

const nf = new Intl.NumberFormat('en-US');

// 1234 -> "1,234" (exact counts in tables where the digits matter).
export function int(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  return nf.format(n);
}

// 1234 -> "1.2k", 3400000 -> "3.4M".
export function num(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  const a = Math.abs(n);
  if (a < 1000) return a >= 100 || Number.isInteger(n) ? String(Math.round(n)) : trim(n.toFixed(a >= 10 ? 1 : 2));
  const units = ['k', 'M', 'G', 'T'];
  let v = n, i = -1;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return trim(v.toFixed(Math.abs(v) >= 100 ? 0 : 1)) + units[i];
}

function trim(s) {
  return s.includes('.') ? s.replace(/\.?0+$/, '') : s;
}

// 3565158 -> "3.4 MiB".
export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : 1)) + ' ' + units[i];
}

// Seconds -> "350 µs", "12 ms", "1.2 s", "3m 4s".
export function secs(sec) {
  if (sec === null || sec === undefined || Number.isNaN(sec)) return '–';
  const a = Math.abs(sec);
  if (a === 0) return '0';
  if (a < 1e-3) return trim((sec * 1e6).toFixed(a < 1e-5 ? 1 : 0)) + ' µs';
  if (a < 1) return trim((sec * 1e3).toFixed(a < 0.01 ? 1 : 0)) + ' ms';
  if (a < 60) return trim(sec.toFixed(a < 10 ? 2 : 1)) + ' s';
  return uptime(sec);
}

// Microseconds -> as secs().
export function us(v) {
  return v === null || v === undefined ? '–' : secs(v / 1e6);
}

// Seconds of uptime -> "4d 3h", "2h 5m", "5m 12s", "12s".
export function uptime(sec) {
  if (sec === null || sec === undefined || Number.isNaN(sec)) return '–';
  sec = Math.floor(sec);
  const d = Math.floor(sec / 86400), hr = Math.floor(sec / 3600) % 24, m = Math.floor(sec / 60) % 60, s = sec % 60;
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

// Unix ms -> "12 s ago" / "3 min ago" / a date; 0 or missing -> "never".
export function ago(unix_ms, now = Date.now()) {
  if (!unix_ms) return 'never';
  const d = Math.max(0, (now - unix_ms) / 1000);
  if (d < 1) return 'just now';
  if (d < 60) return `${Math.floor(d)} s ago`;
  if (d < 3600) return `${Math.floor(d / 60)} min ago`;
  if (d < 86400) return `${Math.floor(d / 3600)} h ago`;
  return new Date(unix_ms).toISOString().slice(0, 16).replace('T', ' ');
}

// Unix ms -> "14:03:22" local time.
export function clock(unix_ms) {
  const d = new Date(unix_ms);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map(x => String(x).padStart(2, '0')).join(':');
}

// Unix ms -> "2024-05-01 14:03:22.123" local time.
export function stamp(unix_ms) {
  if (!unix_ms) return '–';
  const d = new Date(unix_ms);
  const p = (x, n = 2) => String(x).padStart(n, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

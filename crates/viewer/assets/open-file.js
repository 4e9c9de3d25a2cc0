// Opening a splat file by dropping it on the page (PROTOCOL.md, `POST /api/open`): the file goes
// to the server, which reads it and shows it instead of the scene; every page then gets a new
// hello and frames it afresh. Where the server does not open files (a training run), the page
// says so.

import { stage } from '/dom.js';
import { log } from '/panel.js';
import { ember } from '/state.js';

const FORMATS = ['.ply', '.spz', '.splat'];

// Whether the page can open files: the server edits (and so opens) scenes.
const canOpen = () => !!(ember.hello && ember.hello.edits);

// Sends `file` (a File or Blob with a name) to the server; resolves to the server's answer.
export async function openFile(file) {
  const name = file.name || 'scene.ply';
  if (!FORMATS.some((ext) => name.toLowerCase().endsWith(ext))) {
    log(`${name}: not a splat file (.ply, .compressed.ply, .splat or .spz)`, 'error');
    return { ok: false, text: 'not a splat file' };
  }
  if (!canOpen()) {
    log('this server does not open files: trainer view does (not a training run)', 'error');
    return { ok: false, text: 'not opened here' };
  }
  log(`sending ${name} (${(file.size / 1e6).toFixed(1)} MB)…`);
  let response;
  try {
    response = await fetch(`/api/open?name=${encodeURIComponent(name)}`, { method: 'POST', body: file });
  } catch (err) {
    log(`${name}: ${err.message}`, 'error');
    return { ok: false, text: err.message };
  }
  const text = await response.text();
  log(response.ok ? text : `${name}: ${text}`, response.ok ? 'info' : 'error');
  return { ok: response.ok, text };
}

export function listenToDrops() {
  const over = (on) => stage.classList.toggle('dropping', on && canOpen());
  window.addEventListener('dragover', (e) => {
    if (!e.dataTransfer || ![...e.dataTransfer.types].includes('Files')) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = canOpen() ? 'copy' : 'none';
    over(true);
  });
  window.addEventListener('dragleave', (e) => { if (e.relatedTarget === null) over(false); });
  window.addEventListener('drop', (e) => {
    e.preventDefault();
    over(false);
    const file = e.dataTransfer && e.dataTransfer.files[0];
    if (file) openFile(file);
  });
}

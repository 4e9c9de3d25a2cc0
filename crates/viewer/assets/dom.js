// The page's elements that the modules keep at hand, and `$` to look one up by id.

export const $ = (id) => document.getElementById(id);

export const canvas = $('view');
export const overlay = $('overlay');
// Tests read the view's pixels back; this keeps Chrome from warning about repeated reads.
export const ctx = canvas.getContext('2d', { willReadFrequently: true });
export const stage = $('stage');
export const photo = $('photo');
export const cameraSelect = $('camera-select');
export const shSelect = $('sh-degree');
export const fovInput = $('fov');
export const logList = $('log');
export const statusLine = $('status-line');

// A camera path as the page records it: key views a set time apart, in the JSON form that
// `trainer render --path` reads (crates/data/src/camera_path.rs).

export class KeyViews {
  constructor() {
    this.clear();
  }

  clear() {
    this.width = 0;
    this.height = 0;
    this.keys = [];      // {time (s), rotation, translation, fovDeg}
  }

  // Seconds from the first key view to the last.
  duration() {
    return this.keys.length ? this.keys[this.keys.length - 1].time : 0;
  }

  // Adds the view of world-to-camera `rotation` and `translation` with a vertical field of view
  // of `fovDeg`, `seconds` after the last one. The view's size (`{w, h}`, pixels) when the first
  // key view was added is the path's own size, made even (as video encoders of the frames ask).
  add(rotation, translation, fovDeg, { w, h }, seconds) {
    if (!this.keys.length) {
      this.width = 2 * Math.round(w / 2);
      this.height = 2 * Math.round(h / 2);
    }
    const time = this.keys.length ? this.duration() + seconds : 0;
    this.keys.push({ time: Number(time.toFixed(3)), rotation: rotation.slice(), translation: translation.slice(), fovDeg });
  }

  // The frame size: `size` ({width, height}) when given, else the path's own.
  size(size = null) {
    return size || { width: this.width, height: this.height };
  }

  // The file: `fps`, every key view as a pinhole camera of `size` (or the path's own) with its
  // vertical field of view, and `render` (how the page draws: see camera_path.rs) when given.
  json(fps, size = null, render = null) {
    const { width, height } = this.size(size);
    const keyframes = this.keys.map((k) => {
      const f = height / 2 / Math.tan((k.fovDeg * Math.PI) / 360);
      return { time: k.time, camera: { rotation: k.rotation.slice(), translation: k.translation.slice(),
        fx: f, fy: f, cx: width / 2, cy: height / 2, width, height } };
    });
    return render ? { fps, keyframes, render } : { fps, keyframes };
  }
}

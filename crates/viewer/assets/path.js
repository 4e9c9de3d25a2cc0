// A camera path as the page records it: key views a set time apart, in the JSON form that
// `trainer render --path` reads (crates/data/src/camera_path.rs).

export class KeyViews {
  constructor() {
    this.clear();
  }

  clear() {
    this.width = 0;
    this.height = 0;
    this.keys = [];      // {time (s), camera (CameraParams' JSON form)}
  }

  // Seconds from the first key view to the last.
  duration() {
    return this.keys.length ? this.keys[this.keys.length - 1].time : 0;
  }

  // Adds the view of world-to-camera `rotation` and `translation` with a vertical field of view
  // of `fovDeg`, `seconds` after the last one: a pinhole camera at the path's size, which is the
  // view's (`{w, h}`, pixels) when the first key view was added, made even (as video encoders of
  // the frames ask).
  add(rotation, translation, fovDeg, { w, h }, seconds) {
    if (!this.keys.length) {
      this.width = 2 * Math.round(w / 2);
      this.height = 2 * Math.round(h / 2);
    }
    const f = this.height / 2 / Math.tan((fovDeg * Math.PI) / 360);
    const camera = { rotation: rotation.slice(), translation: translation.slice(), fx: f, fy: f,
      cx: this.width / 2, cy: this.height / 2, width: this.width, height: this.height };
    const time = this.keys.length ? this.duration() + seconds : 0;
    this.keys.push({ time: Number(time.toFixed(3)), camera });
  }

  json(fps) {
    return { fps, keyframes: this.keys.map((k) => ({ time: k.time, camera: { ...k.camera } })) };
  }
}

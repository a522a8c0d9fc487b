//! The console's drawings: inline SVG rendered on the server with the page (no
//! script, no CDN; the live parts re-read them like any other markup). Every drawing
//! carries its numbers as text too (a legend, a `<title>` per shape) and as `data-*`
//! attributes, so it reads without colour, without a mouse and in the e2e tests,
//! which compare them with the API.
//!
//! - [`capacity_bar`]: a series' GPUs as one stacked bar, and a team's use against
//!   its fair share;
//! - [`node_strip`]: one cell per node, coloured by the room left (admins);
//! - [`queue_bar`]: a series' queue as a bar of GPUs, the viewer's jobs apart;
//! - [`job_gantt`]: a job's life as a timeline of its states;
//! - [`day_chart`]: a series' last day, queue waits and GPUs in use per hour
//!   (admins).

pub mod capacity_bar;
pub mod day_chart;
pub mod job_gantt;
pub mod node_strip;
pub mod queue_bar;

/// The drawing width in SVG user units; drawings scale to their box.
const WIDTH: f64 = 1000.0;

/// `part` of `whole` as a length along [`WIDTH`] (0 when `whole` is 0).
fn along(part: f64, whole: f64) -> f64 {
    if whole <= 0.0 {
        0.0
    } else {
        (part / whole * WIDTH).clamp(0.0, WIDTH)
    }
}

/// A length or position for an SVG attribute (one decimal).
fn num(x: f64) -> String {
    format!("{x:.1}")
}

/// One segment of a horizontal bar.
#[derive(Debug, Clone)]
struct Segment {
    /// CSS class (its colour).
    class: &'static str,
    /// What it is, for `<title>` and the legend.
    label: String,
    /// Its size in the bar's unit.
    value: f64,
}

/// Segments laid end to end on a bar of `total` units, `height` tall.
fn stacked(segments: &[Segment], total: f64, height: u32) -> maud::Markup {
    let mut x = 0.0;
    maud::html! {
        @for s in segments.iter().filter(|s| s.value > 0.0) {
            @let w = along(s.value, total);
            rect class=(s.class) x=(num(x)) y="0" width=(num(w)) height=(height)
                data-kind=(s.class) data-value=(s.value) {
                title { (s.label) }
            }
            ({ x += w; "" })
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lengths_scale_to_the_width_and_never_divide_by_zero() {
        assert!((super::along(4.0, 16.0) - 250.0).abs() < 1e-9);
        assert!((super::along(20.0, 16.0) - 1000.0).abs() < 1e-9);
        assert!(super::along(3.0, 0.0).abs() < 1e-9);
    }
}

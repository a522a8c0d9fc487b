//! A series' nodes as a strip of cells, one per node, coloured by the share of its
//! GPUs left free (blocked nodes apart), for admins: where a gang would fit, and how
//! fragmented the free GPUs are. Each cell's `<title>` names the node and its room.
//!
//! Past [`MAX_CELLS`] nodes a cell per node would outweigh the page (10 000 nodes
//! are ~1.5 MB of SVG), so the strip draws the nodes sorted by room left, as one bar
//! per room (free GPUs): how many nodes have 8 free, 7, … 0, and how many are blocked.

use maud::{Markup, html};

use super::num;
use crate::cluster::nodes::NodeCell;
use crate::http::console::present;

/// Most nodes drawn one by one.
pub const MAX_CELLS: usize = 200;

/// Cells per row before the strip wraps.
const PER_ROW: usize = 50;

/// The room-left class of a node: `room-0` (full) … `room-4` (all free), or `blocked`.
fn room_class(c: &NodeCell) -> &'static str {
    if c.blocked {
        return "blocked";
    }
    if c.gpus == 0 {
        return "room-0";
    }
    match c.free * 4 / c.gpus {
        0 if c.free > 0 => "room-1",
        0 => "room-0",
        1 => "room-1",
        2 => "room-2",
        3 => "room-3",
        _ => "room-4",
    }
}

/// The strip of one series' nodes (`cells` are that series' nodes).
pub fn series(series: &str, cells: &[&NodeCell]) -> Markup {
    if cells.len() > MAX_CELLS {
        return by_room(series, cells);
    }
    let rows = cells.len().div_ceil(PER_ROW).max(1);
    let size = 1000.0 / PER_ROW as f64;
    let height = rows as f64 * size;
    let free: u32 = cells.iter().filter(|c| !c.blocked).map(|c| c.free).sum();
    html! {
        figure.strip data-series=(series) data-nodes=(cells.len()) data-free=(free) {
            svg viewBox={ "0 0 1000 " (num(height)) } role="img"
                aria-label={ (series) ": " (cells.len()) " nodes, " (free) " GPUs free on schedulable nodes" } {
                @for (i, c) in cells.iter().enumerate() {
                    rect class=(room_class(c)) data-node=(c.name) data-free=(c.free)
                        x=(num((i % PER_ROW) as f64 * size + 1.0)) y=(num((i / PER_ROW) as f64 * size + 1.0))
                        width=(num(size - 2.0)) height=(num(size - 2.0)) {
                        title {
                            (c.name) ": " (c.free) " of " (c.gpus) " GPUs free"
                            @if c.blocked { " (blocked: cordoned, not ready or tainted)" }
                        }
                    }
                }
            }
            figcaption { strong { (series) } " · " (present::count(cells.len() as u64, "node")) ", darker has less room · "
                span.key.room-0 {} "full " span.key.room-4 {} "all free " span.key.blocked {} "blocked" }
        }
    }
}

/// A large series: its nodes sorted by room left, one bar per room.
fn by_room(series: &str, cells: &[&NodeCell]) -> Markup {
    // (blocked, free GPUs) → nodes, most room first, blocked last.
    let mut runs: std::collections::BTreeMap<(bool, std::cmp::Reverse<u32>), (u32, &NodeCell)> =
        std::collections::BTreeMap::new();
    for c in cells {
        let key = (
            c.blocked,
            std::cmp::Reverse(if c.blocked { 0 } else { c.free }),
        );
        runs.entry(key).or_insert((0, c)).0 += 1;
    }
    let free: u32 = cells.iter().filter(|c| !c.blocked).map(|c| c.free).sum();
    let total = cells.len() as f64;
    let mut x = 0.0;
    html! {
        figure.strip.by-room data-series=(series) data-nodes=(cells.len()) data-free=(free) {
            svg viewBox="0 0 1000 28" preserveAspectRatio="none" role="img"
                aria-label={ (series) ": " (cells.len()) " nodes, " (free) " GPUs free on schedulable nodes" } {
                @for ((blocked, room), (n, sample)) in &runs {
                    @let w = super::along(f64::from(*n), total);
                    rect class=(room_class(sample)) data-nodes=(n) data-free-each=(room.0)
                        x=(num(x)) y="0" width=(num(w)) height="28" {
                        title {
                            (present::count(*n, "node"))
                            @if *blocked { " blocked (cordoned, not ready or tainted)" }
                            @else { " with " (room.0) " GPUs free" }
                        }
                    }
                    ({ x += w; "" })
                }
            }
            figcaption { strong { (series) } " · " (present::count(cells.len() as u64, "node"))
                ", sorted by room left (too many to draw one by one) · "
                span.key.room-0 {} "full " span.key.room-4 {} "all free " span.key.blocked {} "blocked" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(gpus: u32, free: u32, blocked: bool) -> NodeCell {
        NodeCell {
            name: "n".into(),
            series: "h100".into(),
            gpus,
            free,
            blocked,
        }
    }

    #[test]
    fn a_large_series_is_drawn_by_room_in_a_few_shapes() {
        let cells: Vec<NodeCell> = (0..10_000u32)
            .map(|i| NodeCell {
                name: format!("node-{i}"),
                series: "h100".into(),
                gpus: 8,
                free: i % 9,
                blocked: i % 100 == 0,
            })
            .collect();
        let refs: Vec<&NodeCell> = cells.iter().collect();
        let html = series("h100", &refs).into_string();
        assert!(html.len() < 5_000, "{} bytes", html.len());
        assert_eq!(html.matches("<rect").count(), 10, "{html}");
        assert!(
            html.contains(r#"data-nodes="100" data-free-each="0""#),
            "{html}"
        );
        assert!(!html.contains("node-1"), "{html}");
    }

    #[test]
    fn cells_are_coloured_by_the_room_left() {
        assert_eq!(room_class(&cell(8, 0, false)), "room-0");
        assert_eq!(room_class(&cell(8, 1, false)), "room-1");
        assert_eq!(room_class(&cell(8, 4, false)), "room-2");
        assert_eq!(room_class(&cell(8, 8, false)), "room-4");
        assert_eq!(room_class(&cell(8, 8, true)), "blocked");
        assert_eq!(room_class(&cell(0, 0, false)), "room-0");
    }
}

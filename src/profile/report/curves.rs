//! The SVG chart of bytes in use and bytes reserved over time, from the timeline, with the
//! limit, region changes, transfers, the peak and the snapshot's instant marked.
//!
//! The byte axis is scaled to the bytes in use, as PyTorch's memory_viz scales its active
//! memory: a preallocating arena reserves most of the device at once, and an axis scaled to
//! the reservation flattens a leak of a few hundred KiB into a line. The reservation is drawn
//! as a line where it fits and pinned to the top, with its value, where it does not.

use super::colours::{IN_USE_STROKE, RESERVED_STROKE};
use super::format::{duration_ns, Bytes};
use crate::trace::timeline::{MemoryTimeline, TimelineEvent, TimelineEventKind};
use std::fmt::Write;

/// Width of the plot area in CSS pixels; the curves are reduced to at most four points per
/// pixel column (entry, highest, lowest, exit), so a million events draw as fast as a hundred
/// and no peak is lost.
pub const PLOT_WIDTH_PX: f64 = 1060.0;
/// Height of the plot area.
const PLOT_HEIGHT_PX: f64 = 230.0;
/// Room for the byte axis on the left.
const LEFT_PX: f64 = 90.0;
/// Room above the plot for the legend.
const TOP_PX: f64 = 26.0;
/// Room below: the time axis and the transfer lane.
const BOTTOM_PX: f64 = 46.0;
/// Ticks per axis.
const TICKS: u32 = 5;

/// The chart, or `None` when the timeline holds no event.
pub fn curves(
    timeline: &MemoryTimeline,
    limit: Option<u64>,
    snapshot_ns: Option<u64>,
    out_of_memory: bool,
) -> Option<String> {
    let events = &timeline.events;
    let chart = Chart::measure(events, limit, snapshot_ns)?;
    let mut svg = String::new();
    chart.write_open_tag(&mut svg);
    chart.write_byte_axis(&mut svg);
    chart.write_time_axis(&mut svg);
    chart.write_region_events(&mut svg, events);
    chart.write_limit(&mut svg);
    chart.write_curves(&mut svg, events);
    chart.write_peak(&mut svg);
    chart.write_transfers(&mut svg, events);
    if let Some(t) = snapshot_ns.filter(|&t| t >= chart.t0) {
        chart.write_snapshot_marker(&mut svg, t, out_of_memory);
    }
    write_legend(&mut svg);
    svg.push_str("</svg>");
    Some(svg)
}

/// The y of the time axis: the bottom edge of the plot area.
const AXIS_Y_PX: f64 = TOP_PX + PLOT_HEIGHT_PX;

/// What the chart is drawn from: the time span, the peak of bytes in use, the most bytes
/// reserved and the limit to draw, with the byte axis scaled to them. Measured once, so every
/// part of the chart places times and byte counts the same way.
struct Chart {
    /// The first instant shown.
    t0: u64,
    /// The last instant shown (the snapshot's included), after `t0`.
    t1: u64,
    /// `t1 - t0` in nanoseconds as a float, at least 1.
    span: f64,
    /// The peak of bytes in use.
    peak: u64,
    /// The first moment of the peak.
    peak_ns: u64,
    /// The highest bytes reserved.
    most_reserved: u64,
    /// The limit, when it is near enough to the curve to draw.
    limit: Option<u64>,
    /// The top of the byte axis: a round number above the peak and the limit.
    y_max: f64,
    /// `y_max` in bytes: values above it are pinned to the top.
    axis_top: u64,
}

impl Chart {
    /// The chart's measures for `events`, or `None` when there is none.
    fn measure(
        events: &[TimelineEvent],
        limit: Option<u64>,
        snapshot_ns: Option<u64>,
    ) -> Option<Chart> {
        // A timeline is in time order, but one built or edited by hand may not be: take the
        // extremes, and keep every difference below in range whatever the stamps.
        let t0 = events.iter().map(|e| e.time_ns).min()?;
        let t1 = events
            .iter()
            .map(|e| e.time_ns)
            .chain(snapshot_ns)
            .max()
            .unwrap_or(t0)
            .max(t0.saturating_add(1));
        // The peak of bytes in use and its first moment.
        // Counters from the arena's own events alone (see `write_curves`).
        let memory = || events.iter().filter(|e| e.kind.changes_counters());
        let (peak_ns, peak) = memory().fold((t0, 0u64), |(at, peak), e| {
            if e.bytes_in_use > peak {
                (e.time_ns, e.bytes_in_use)
            } else {
                (at, peak)
            }
        });
        let most_reserved = memory().map(|e| e.bytes_reserved).max().unwrap_or(0);
        // The limit is drawn when it is near the curve; a limit far above would flatten it.
        let limit = limit.filter(|&l| l > 0 && l <= peak.saturating_mul(2));
        let y_max = nice_ceiling(peak.max(limit.unwrap_or(0)).max(1) as f64 * 1.05);
        Some(Chart {
            t0,
            t1,
            span: t1.saturating_sub(t0).max(1) as f64,
            peak,
            peak_ns,
            most_reserved,
            limit,
            y_max,
            axis_top: y_max as u64,
        })
    }

    /// The x of instant `t`.
    fn x(&self, t: u64) -> f64 {
        LEFT_PX + t.saturating_sub(self.t0) as f64 / self.span * PLOT_WIDTH_PX
    }

    /// The y of `bytes`; values above the axis (the reservation, mostly) are pinned to its top.
    fn y(&self, bytes: u64) -> f64 {
        TOP_PX + PLOT_HEIGHT_PX * (1.0 - bytes.min(self.axis_top) as f64 / self.y_max)
    }

    /// The `<svg>` tag, with the axis top and the peak as data attributes for tests and tools.
    fn write_open_tag(&self, svg: &mut String) {
        let width = LEFT_PX + PLOT_WIDTH_PX + 20.0;
        let height = TOP_PX + PLOT_HEIGHT_PX + BOTTOM_PX;
        let (axis_top, peak) = (self.axis_top, self.peak);
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="curves" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="bytes in use and reserved over time" data-axis-bytes="{axis_top}" data-peak-bytes="{peak}">"#
        );
    }

    /// The grid lines and the byte axis's labels.
    fn write_byte_axis(&self, svg: &mut String) {
        for i in 0..=TICKS {
            let bytes = (self.y_max * f64::from(i) / f64::from(TICKS)) as u64;
            let yy = self.y(bytes);
            let _ = write!(
                svg,
                r##"<line x1="{LEFT_PX}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e6e9ee" stroke-width="1"/><text x="{:.1}" y="{:.1}" class="axis" text-anchor="end">{}</text>"##,
                LEFT_PX + PLOT_WIDTH_PX,
                LEFT_PX - 8.0,
                yy + 4.0,
                Bytes(bytes)
            );
        }
    }

    /// The time axis's ticks and labels.
    fn write_time_axis(&self, svg: &mut String) {
        let (t0, t1) = (self.t0, self.t1);
        for i in 0..=TICKS {
            // In u128: the span times the tick index may exceed 64 bits.
            let offset = u128::from(t1 - t0) * u128::from(i) / u128::from(TICKS);
            let t = t0.saturating_add(u64::try_from(offset).unwrap_or(u64::MAX));
            let xx = self.x(t);
            let anchor = match i {
                0 => "start",
                TICKS => "end",
                _ => "middle",
            };
            let _ = write!(
                svg,
                r##"<line x1="{xx:.1}" y1="{AXIS_Y_PX}" x2="{xx:.1}" y2="{:.1}" stroke="#9aa3b2" stroke-width="1"/><text x="{xx:.1}" y="{:.1}" class="axis" text-anchor="{anchor}">{}</text>"##,
                AXIS_Y_PX + 5.0,
                AXIS_Y_PX + 18.0,
                duration_ns(t)
            );
        }
    }

    /// Region reserves and releases: dotted verticals.
    fn write_region_events(&self, svg: &mut String, events: &[TimelineEvent]) {
        for e in events {
            if let TimelineEventKind::RegionReserve { region, size }
            | TimelineEventKind::RegionRelease { region, size } = &e.kind
            {
                let verb = if matches!(e.kind, TimelineEventKind::RegionReserve { .. }) {
                    "reserve"
                } else {
                    "release"
                };
                let xx = self.x(e.time_ns);
                let _ = write!(
                    svg,
                    r##"<line class="region-event" x1="{xx:.1}" y1="{TOP_PX}" x2="{xx:.1}" y2="{AXIS_Y_PX}" stroke="#9aa3b2" stroke-width="1" stroke-dasharray="2,3"><title>{verb} region {} ({}) at {}</title></line>"##,
                    region.0,
                    Bytes(*size),
                    duration_ns(e.time_ns)
                );
            }
        }
    }

    /// The limit as a dashed horizontal, when it is drawn.
    fn write_limit(&self, svg: &mut String) {
        let Some(limit) = self.limit else {
            return;
        };
        let yy = self.y(limit);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT_PX}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#1d2430" stroke-width="1" stroke-dasharray="6,4"/><text x="{:.1}" y="{:.1}" class="axis" text-anchor="end">limit {}</text>"##,
            LEFT_PX + PLOT_WIDTH_PX,
            LEFT_PX + PLOT_WIDTH_PX - 4.0,
            yy - 4.0,
            Bytes(limit)
        );
    }

    /// The curves: bytes in use filled, bytes reserved as a line, and the reservation's value
    /// where it goes above the axis. They step at the arena's own events, which change the
    /// counters (a timeline built by hand, or written before its events carried the counters
    /// of their time, may give a transfer, dated at its start, the counters after its call).
    fn write_curves(&self, svg: &mut String, events: &[TimelineEvent]) {
        let events: Vec<TimelineEvent> = events
            .iter()
            .filter(|e| e.kind.changes_counters())
            .cloned()
            .collect();
        let events = &events[..];
        let x = |t: u64| self.x(t);
        let in_use = step_points(events, |e| e.bytes_in_use, &x, self.t1);
        let reserved = step_points(events, |e| e.bytes_reserved, &x, self.t1);
        let _ = write!(
            svg,
            r#"<polygon class="in-use-area" points="{LEFT_PX},{AXIS_Y_PX} {} {:.1},{AXIS_Y_PX}" fill="{IN_USE_STROKE}" fill-opacity="0.16"/>"#,
            self.points(&in_use),
            LEFT_PX + PLOT_WIDTH_PX
        );
        let _ = write!(
            svg,
            r#"<polyline class="bytes-reserved" points="{}" fill="none" stroke="{RESERVED_STROKE}" stroke-width="2"/>"#,
            self.points(&reserved)
        );
        let _ = write!(
            svg,
            r#"<polyline class="bytes-in-use" points="{}" fill="none" stroke="{IN_USE_STROKE}" stroke-width="1.6"/>"#,
            self.points(&in_use)
        );
        if self.most_reserved > self.axis_top {
            let _ = write!(
                svg,
                r#"<text class="reserved-above axis" x="{:.1}" y="{:.1}" text-anchor="end" fill="{RESERVED_STROKE}">bytes reserved up to {} (above the axis)</text>"#,
                LEFT_PX + PLOT_WIDTH_PX - 4.0,
                TOP_PX + 12.0,
                Bytes(self.most_reserved)
            );
        }
    }

    /// A step curve's points as an SVG `points` attribute.
    fn points(&self, points: &[(f64, u64)]) -> String {
        points
            .iter()
            .map(|&(px, bytes)| format!("{px:.1},{:.1}", self.y(bytes)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The peak of bytes in use: a dot, labelled on the side with more room.
    fn write_peak(&self, svg: &mut String) {
        if self.peak == 0 {
            return;
        }
        let (px, py) = (self.x(self.peak_ns), self.y(self.peak));
        let anchor = if px > LEFT_PX + PLOT_WIDTH_PX / 2.0 {
            "end"
        } else {
            "start"
        };
        let dx = if anchor == "end" { -6.0 } else { 6.0 };
        let _ = write!(
            svg,
            r#"<g class="peak"><circle cx="{px:.1}" cy="{py:.1}" r="3.5" fill="{IN_USE_STROKE}"/><text x="{:.1}" y="{:.1}" class="axis" text-anchor="{anchor}">peak {} at {}</text></g>"#,
            px + dx,
            py + 14.0,
            Bytes(self.peak),
            duration_ns(self.peak_ns)
        );
    }

    /// Transfers: ticks in a lane under the axis, wide as their duration.
    fn write_transfers(&self, svg: &mut String, events: &[TimelineEvent]) {
        let lane = AXIS_Y_PX + 26.0;
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" class="axis" text-anchor="end">transfers</text>"#,
            LEFT_PX - 8.0,
            lane + 9.0
        );
        for e in events {
            if let TimelineEventKind::Transfer {
                direction,
                bytes,
                explicit,
                duration_ns: d,
                ..
            } = &e.kind
            {
                let xx = self.x(e.time_ns);
                let w = (self
                    .x(e.time_ns.saturating_add(*d))
                    .min(LEFT_PX + PLOT_WIDTH_PX)
                    - xx)
                    .max(1.0);
                let colour = if *explicit { "#59a14f" } else { "#e15759" };
                let _ = write!(
                    svg,
                    r#"<rect class="transfer" x="{xx:.1}" y="{lane}" width="{w:.1}" height="12" fill="{colour}" fill-opacity="0.75"><title>{direction} {} ({}) at {} for {}</title></rect>"#,
                    Bytes(*bytes),
                    if *explicit { "explicit" } else { "implicit" },
                    duration_ns(e.time_ns),
                    duration_ns(*d)
                );
            }
        }
    }

    /// The snapshot's instant `t` as a vertical, named "out of memory" when the snapshot was
    /// taken on one.
    fn write_snapshot_marker(&self, svg: &mut String, t: u64, out_of_memory: bool) {
        let xx = self.x(t);
        let (text, colour) = if out_of_memory {
            ("out of memory", "#e15759")
        } else {
            ("snapshot", "#1d2430")
        };
        let _ = write!(
            svg,
            r#"<line x1="{xx:.1}" y1="{TOP_PX}" x2="{xx:.1}" y2="{AXIS_Y_PX}" stroke="{colour}" stroke-width="1.5"/><text x="{:.1}" y="{:.1}" class="axis" text-anchor="end" fill="{colour}">{text}</text>"#,
            xx - 4.0,
            TOP_PX + 12.0
        );
    }
}

/// The legend: the two curves and the two kinds of transfer.
fn write_legend(svg: &mut String) {
    let _ = write!(
        svg,
        r##"<g class="legend" transform="translate({LEFT_PX},4)"><rect x="0" y="4" width="14" height="4" fill="{IN_USE_STROKE}"/><text x="20" y="11" class="axis">bytes in use</text><rect x="120" y="4" width="14" height="4" fill="{RESERVED_STROKE}"/><text x="140" y="11" class="axis">bytes reserved</text><rect x="262" y="1" width="10" height="10" fill="#59a14f"/><text x="278" y="11" class="axis">explicit transfer</text><rect x="398" y="1" width="10" height="10" fill="#e15759"/><text x="414" y="11" class="axis">implicit transfer</text></g>"##
    );
}

/// A step curve of `value` reduced to at most four points per pixel column: where the column
/// is entered (the previous value), its highest and lowest values, and its last.
fn step_points(
    events: &[TimelineEvent],
    value: impl Fn(&TimelineEvent) -> u64,
    x: &impl Fn(u64) -> f64,
    t_end: u64,
) -> Vec<(f64, u64)> {
    let mut points = Vec::new();
    let mut previous = 0u64;
    let mut i = 0;
    while i < events.len() {
        let column = x(events[i].time_ns).floor();
        let (mut high, mut low, mut last) = (0u64, u64::MAX, 0u64);
        let px = x(events[i].time_ns);
        while i < events.len() && x(events[i].time_ns).floor() == column {
            let v = value(&events[i]);
            high = high.max(v);
            low = low.min(v);
            last = v;
            i += 1;
        }
        points.push((px, previous));
        if high != previous || low != previous {
            points.push((px, high));
            points.push((px, low));
        }
        points.push((px, last));
        previous = last;
    }
    points.push((x(t_end), previous));
    points.dedup();
    points
}

/// The smallest round number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 × 10^n of a binary unit) at or
/// above `v`, so axis ticks fall on readable values without wasting much height.
fn nice_ceiling(v: f64) -> f64 {
    let unit = [1u64 << 30, 1 << 20, 1 << 10, 1]
        .into_iter()
        .find(|&u| v >= u as f64)
        .unwrap_or(1) as f64;
    let scaled = v / unit;
    let magnitude = 10f64.powf(scaled.log10().floor());
    let step = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= scaled)
        .unwrap_or(10.0 * magnitude);
    step * unit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_tops_are_round_numbers_of_a_binary_unit() {
        assert_eq!(
            nice_ceiling(336.0 * (1 << 20) as f64),
            400.0 * (1 << 20) as f64
        );
        assert_eq!(nice_ceiling(1.6 * (1 << 30) as f64), 2.0 * (1 << 30) as f64);
    }

    #[test]
    fn the_peak_is_dated_by_the_arenas_events_not_by_a_transfer_s_start() {
        let event = |time_ns, bytes_in_use, kind| TimelineEvent {
            time_ns,
            bytes_in_use,
            bytes_reserved: 4096,
            kind,
        };
        // A `device_put`: its transfer dated at the call's start with the counters after it.
        let transfer = TimelineEventKind::Transfer {
            direction: crate::transfer::TransferDirection::HostToDevice,
            bytes: 200,
            arrays: 1,
            explicit: true,
            duration_ns: 50,
        };
        let region = crate::arena::RegionId(1);
        let alloc = TimelineEventKind::Alloc {
            allocation: crate::arena::AllocationId(1),
            region,
            offset: 0,
            size: 256,
            requested: 200,
            label: None,
            site: None,
            dtype: None,
            shape: None,
        };
        let reserve = TimelineEventKind::RegionReserve { region, size: 4096 };
        let events = [
            event(0, 256, transfer),
            event(5, 0, reserve),
            event(10, 256, alloc),
        ];
        let chart = Chart::measure(&events, None, None).unwrap();
        assert_eq!((chart.peak_ns, chart.peak), (10, 256));
    }

    #[test]
    fn each_pixel_column_keeps_its_peak() {
        let events: Vec<TimelineEvent> = (0..10_000u64)
            .map(|i| TimelineEvent {
                time_ns: i,
                bytes_in_use: if i == 5_000 { 1 << 30 } else { i },
                bytes_reserved: 1 << 31,
                kind: TimelineEventKind::Dispatch {
                    name: "x".into(),
                    submission: i,
                },
            })
            .collect();
        let x = |t: u64| t as f64 / 10_000.0 * PLOT_WIDTH_PX;
        let points = step_points(&events, |e| e.bytes_in_use, &x, 10_000);
        assert!(points.len() <= 4 * PLOT_WIDTH_PX as usize + 2);
        assert!(points.iter().any(|&(_, v)| v == 1 << 30));
    }
}

//! The colours of the report: one per label (largest labels first), and fixed ones for free,
//! pending and unlabelled memory and for the two curves.

use std::collections::HashMap;

/// Fill of chunks in use without a label.
pub const UNLABELLED_FILL: &str = "#8a94a6";
/// Fill of free chunks.
pub const FREE_FILL: &str = "#e9edf2";
/// Fill of chunks freed but still used by queued GPU work: a grey hatch (the SVG pattern
/// [`PENDING_PATTERN`]), so "waiting" never reads as one of the label colours.
pub const PENDING_FILL: &str = "url(#pending-hatch)";
/// The hatch behind [`PENDING_FILL`], defined once in the region map.
pub const PENDING_PATTERN: &str = r##"<defs><pattern id="pending-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"/><rect width="2.5" height="6" fill="#5b6575"/></pattern></defs>"##;
/// The same hatch for the legend's CSS swatch.
pub const PENDING_SWATCH: &str = "repeating-linear-gradient(45deg,#5b6575 0 2px,#ffffff 2px 5px)";
/// Fill shared by labels past the palette.
pub const OTHER_LABEL_FILL: &str = "#b07aa1";
/// Stroke of the bytes-in-use curve.
pub const IN_USE_STROKE: &str = "#2f6fdb";
/// Stroke of the bytes-reserved curve.
pub const RESERVED_STROKE: &str = "#d1495b";

/// Distinct label colours, largest labels first: Tableau 10 (Maureen Stone's palette, made to
/// stay apart for common colour-vision deficiencies) without its grey and purple, which mean
/// "unlabelled" and "other labels" here.
pub const LABEL_PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#ff9da7", "#9c755f",
];

/// The colour of each label: the palette in order of the labels' bytes (largest first), the
/// rest [`OTHER_LABEL_FILL`]. Ranking by bytes gives the labels that dominate the map the
/// colours that are easiest to tell apart, and makes the colours stable for a given state.
#[derive(Debug, Default)]
pub struct LabelColours {
    colours: HashMap<String, &'static str>,
}

impl LabelColours {
    /// Colours for labels ranked by bytes, largest first.
    pub fn new<'a>(ranked: impl IntoIterator<Item = &'a str>) -> LabelColours {
        LabelColours {
            colours: ranked
                .into_iter()
                .enumerate()
                .map(|(rank, label)| {
                    let colour = LABEL_PALETTE.get(rank).copied().unwrap_or(OTHER_LABEL_FILL);
                    (label.to_string(), colour)
                })
                .collect(),
        }
    }

    /// The fill of an in-use chunk with this label.
    pub fn fill(&self, label: Option<&str>) -> &'static str {
        label
            .and_then(|l| self.colours.get(l).copied())
            .unwrap_or(UNLABELLED_FILL)
    }
}

//! The versioned speedmatrix result model and its renderers: JSON, Markdown, CSV, HTML, compare.

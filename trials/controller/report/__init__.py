"""The job report: the HTML page, its data, plots and inline SVG, written as a staged folder."""

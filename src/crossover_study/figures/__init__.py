"""The report's and the paper's figures: their tidy data in pandas, style, grids, scaling,
drawing with seaborn, the files a figure is written to (and the sources it records),
the paper's figures from the committed reference runs, and the check that the report
loads in a browser. Never imports the answers (the report notebook composes both)."""

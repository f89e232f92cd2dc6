"""Reports: an estimate or a plan as text, JSON and HTML, each figure's arithmetic, and the
site's figures. Renderers take the library's records; they compute nothing of their own."""

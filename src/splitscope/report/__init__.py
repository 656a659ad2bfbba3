"""The report: renders a finished audit document (HTML with figures, the gallery chosen from
the document's tables). It imports no layer package: everything it shows is in the document."""

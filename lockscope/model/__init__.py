"""The data model, on the ground floor: the run record (record.py) and the
probe's data as kept in it (probedata.py, with holddata.py, usdtdata.py and
ktextdata.py for its parts), the rows read at record time and not kept
(loaderrows.py), confirm's record (confirmdata.py), and the JSON
conversion they share (jsondata.py). These import nothing of lockscope but
each other, atomicio and proberows' shared constants: the measuring side, the analyzer, the
reports and the command line build on them."""

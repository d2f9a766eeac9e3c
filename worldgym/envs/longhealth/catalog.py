"""The fictional clinical world the synthetic panel draws from: names, conditions, drugs, procedures, labs.

Every name, hospital and physician is invented. Pools are grouped by category so that a question's wrong
options come from the same category as its answer (another drug of the same indication, another finding of
the same examination, another value of the same lab).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ALLERGIES", "COMORBIDITIES", "CONDITIONS", "DRUGS", "FEMALE_NAMES", "HOSPITALS", "LABS",
    "LAST_NAMES", "MALE_NAMES", "MALE_ONLY", "OCCUPATIONS", "PHYSICIANS", "PROCEDURES", "SYMPTOMS",
    "Comorbidity", "Condition", "Drug", "Lab", "Procedure"]


@dataclass(frozen=True)
class Drug:
    """A drug: its name, the doses it comes in, route and usual frequency, and whether it is taken at home."""

    name: str
    doses: tuple[str, ...]
    route: str
    frequency: str
    oral: bool = True


@dataclass(frozen=True)
class Procedure:
    """An examination or intervention and the findings its report may state (one is the patient's)."""

    name: str
    kind: str  # "imaging", "endoscopy", "intervention", "function test", "biopsy"
    findings: tuple[str, ...]


@dataclass(frozen=True)
class Lab:
    """A laboratory value: name, unit, reference range and the decimals it is written with."""

    name: str
    unit: str
    low: float
    high: float
    decimals: int


@dataclass(frozen=True)
class Comorbidity:
    """A pre-existing condition and the home medication (drug name, dose, frequency) that treats it."""

    name: str
    drug: str
    dose: str
    frequency: str


@dataclass(frozen=True)
class Condition:
    """A main diagnosis: department, symptoms, inpatient drugs, examinations, and labs it drives out of range.

    ``abnormal`` maps a lab name to the (low, high) range of its admission value.
    """

    diagnosis: str
    department: str
    symptoms: tuple[str, ...]
    drugs: tuple[str, ...]
    procedures: tuple[str, ...]
    abnormal: dict[str, tuple[float, float]]
    course: str  # one sentence on the treatment, for the discharge letter

FEMALE_NAMES = ("Adela", "Brigitta", "Carola", "Dagny", "Elvira", "Fenna", "Greta", "Hedda", "Ilka",
                "Jolanda", "Katrin", "Liesel", "Marlene", "Nelia", "Odile", "Petra", "Rosalind", "Svea",
                "Thea", "Ulrike")
MALE_NAMES = ("Anselm", "Bertram", "Casimir", "Detlef", "Egon", "Falko", "Gregor", "Hartwig", "Ingo", "Joris",
              "Konrad", "Leopold", "Magnus", "Norbert", "Oswin", "Pius", "Rupert", "Sigurd", "Tassilo",
              "Volker")
LAST_NAMES = ("Ambrose", "Birkenfeld", "Corvin", "Dornbach", "Elsholz", "Falkenrath", "Grünwald", "Hollerith",
              "Isenhart", "Jessberger", "Kranich", "Lindqvist", "Mertensen", "Nordhoff", "Osterkamp",
              "Pellworm", "Quandtmeier", "Rosenhain", "Sattlerow", "Tiedemann", "Ulbrecht", "Vossberg",
              "Wendeling", "Zirnstein")
PHYSICIANS = ("Dr. A. Halvorsen", "Dr. B. Kettler", "Dr. C. Moravec", "Dr. D. Samaras", "Dr. E. Lundgren",
              "Dr. F. Okafor", "Dr. G. Varga", "Dr. H. Ibsen", "Dr. I. Castellan", "Dr. J. Whitcombe",
              "Dr. K. Tanaka", "Dr. L. Brandauer")
HOSPITALS = ("Northbridge University Hospital", "St. Elara Clinic", "Havelstein General Hospital",
             "Larkmoor Medical Center", "Kestrel Valley Hospital")
OCCUPATIONS = ("retired teacher", "bus driver", "accountant", "carpenter", "nurse", "librarian",
               "software developer", "farmer", "pharmacist", "retired postal worker", "chef", "architect",
               "electrician", "shop owner", "social worker")
ALLERGIES = ("penicillin", "sulfonamides", "latex", "iodinated contrast medium", "codeine", "ibuprofen",
             "peanuts", "bee venom", "metamizole", "adhesive plasters")
SYMPTOMS = ("fever", "productive cough", "shortness of breath", "pleuritic chest pain", "chills", "fatigue",
            "loss of appetite", "retrosternal chest pressure", "pain radiating to the left arm", "sweating",
            "nausea", "dizziness", "night sweats", "weight loss", "painless swelling of the neck", "itching",
            "upper abdominal pain radiating to the back", "vomiting", "abdominal bloating",
            "yellowing of the skin", "right-sided weakness", "slurred speech",
            "drooping of the right corner of the mouth", "word-finding difficulties", "headache",
            "swelling of both legs", "breathlessness when lying flat", "weight gain", "nocturnal cough",
            "palpitations", "calf pain", "coughing up blood", "blood in the stool", "change in bowel habits",
            "lower abdominal pain", "constipation", "flank pain", "painful urination", "frequent urination",
            "wheezing", "increased sputum", "chest tightness")

DRUGS: dict[str, Drug] = {drug.name: drug for drug in (
    Drug("ceftriaxone", ("1 g", "2 g"), "intravenously", "once daily", oral=False),
    Drug("azithromycin", ("250 mg", "500 mg"), "orally", "once daily"),
    Drug("amoxicillin/clavulanic acid", ("875/125 mg", "500/125 mg"), "orally", "twice daily"),
    Drug("paracetamol", ("500 mg", "1 g"), "orally", "up to four times daily"),
    Drug("enoxaparin", ("40 mg", "60 mg", "80 mg"), "subcutaneously", "once daily", oral=False),
    Drug("salbutamol", ("100 micrograms", "200 micrograms"), "by inhalation", "as needed"),
    Drug("acetylcysteine", ("200 mg", "600 mg"), "orally", "once daily"),
    Drug("aspirin", ("100 mg", "75 mg", "300 mg"), "orally", "once daily"),
    Drug("ticagrelor", ("90 mg", "60 mg"), "orally", "twice daily"),
    Drug("unfractionated heparin", ("5000 IU", "25000 IU per day"), "intravenously", "continuously",
         oral=False),
    Drug("atorvastatin", ("40 mg", "80 mg", "20 mg"), "orally", "once daily"),
    Drug("metoprolol succinate", ("47.5 mg", "95 mg", "23.75 mg"), "orally", "once daily"),
    Drug("ramipril", ("2.5 mg", "5 mg", "10 mg"), "orally", "once daily"),
    Drug("nitroglycerin", ("0.4 mg", "0.8 mg"), "sublingually", "as needed"),
    Drug("pantoprazole", ("20 mg", "40 mg"), "orally", "once daily"),
    Drug("rituximab", ("375 mg/m2",), "intravenously", "on day 1 of each cycle", oral=False),
    Drug("cyclophosphamide", ("750 mg/m2",), "intravenously", "on day 1 of each cycle", oral=False),
    Drug("doxorubicin", ("50 mg/m2",), "intravenously", "on day 1 of each cycle", oral=False),
    Drug("vincristine", ("1.4 mg/m2",), "intravenously", "on day 1 of each cycle", oral=False),
    Drug("prednisolone", ("100 mg", "50 mg", "40 mg", "25 mg"), "orally", "once daily"),
    Drug("allopurinol", ("300 mg", "100 mg", "150 mg"), "orally", "once daily"),
    Drug("ondansetron", ("4 mg", "8 mg"), "orally", "twice daily"),
    Drug("cotrimoxazole", ("960 mg", "480 mg"), "orally", "three times weekly"),
    Drug("Ringer's lactate", ("3 l per day", "2 l per day"), "intravenously", "continuously", oral=False),
    Drug("morphine", ("2 mg", "5 mg"), "intravenously", "as needed", oral=False),
    Drug("metamizole", ("500 mg", "1 g"), "orally", "up to four times daily"),
    Drug("piperacillin/tazobactam", ("4.5 g",), "intravenously", "three times daily", oral=False),
    Drug("alteplase", ("0.9 mg/kg",), "intravenously", "once", oral=False),
    Drug("clopidogrel", ("75 mg", "300 mg"), "orally", "once daily"),
    Drug("furosemide", ("40 mg", "20 mg", "80 mg"), "orally", "once daily"),
    Drug("spironolactone", ("25 mg", "50 mg", "12.5 mg"), "orally", "once daily"),
    Drug("bisoprolol", ("2.5 mg", "5 mg", "1.25 mg"), "orally", "once daily"),
    Drug("sacubitril/valsartan", ("49/51 mg", "24/26 mg", "97/103 mg"), "orally", "twice daily"),
    Drug("empagliflozin", ("10 mg", "25 mg"), "orally", "once daily"),
    Drug("potassium chloride", ("20 mmol", "40 mmol"), "orally", "once daily"),
    Drug("apixaban", ("5 mg", "2.5 mg", "10 mg"), "orally", "twice daily"),
    Drug("rivaroxaban", ("20 mg", "15 mg"), "orally", "once daily"),
    Drug("cefuroxime", ("1.5 g",), "intravenously", "three times daily", oral=False),
    Drug("metronidazole", ("500 mg",), "intravenously", "three times daily", oral=False),
    Drug("ciprofloxacin", ("500 mg", "250 mg", "750 mg"), "orally", "twice daily"),
    Drug("ipratropium", ("20 micrograms", "40 micrograms"), "by inhalation", "four times daily"),
    Drug("tiotropium", ("18 micrograms", "2.5 micrograms"), "by inhalation", "once daily"),
    Drug("doxycycline", ("100 mg", "200 mg"), "orally", "once daily"),
    Drug("macrogol", ("13 g", "26 g"), "orally", "once daily"),
)}

# Each examination has five possible findings: the report states one, the others are wrong options.
PROCEDURES: dict[str, Procedure] = {procedure.name: procedure for procedure in (
    Procedure("chest X-ray", "imaging", (
        "consolidation of the right lower lobe", "small bilateral pleural effusions",
        "no acute cardiopulmonary abnormality", "enlarged cardiac silhouette with pulmonary congestion",
        "hyperinflated lungs with flattened diaphragms")),
    Procedure("CT of the chest", "imaging", (
        "ground-glass opacities in both lower lobes", "a 14 mm nodule in the left upper lobe",
        "enlarged mediastinal lymph nodes", "centrilobular emphysema without infiltrate",
        "a segmental consolidation with air bronchogram")),
    Procedure("bronchoscopy", "endoscopy", (
        "purulent secretions in the right lower lobe bronchi",
        "normal bronchial anatomy without endobronchial lesion", "mucosal swelling of the main bronchi",
        "a mucus plug in the middle lobe bronchus", "slight contact bleeding of the inflamed mucosa")),
    Procedure("12-lead ECG", "function test", (
        "ST depressions in leads V4 to V6", "sinus rhythm with left bundle branch block",
        "atrial fibrillation with a ventricular rate of 110 per minute",
        "normal sinus rhythm without ischemic changes", "T-wave inversions in the inferior leads")),
    Procedure("coronary angiography", "intervention", (
        "a 90% stenosis of the proximal left anterior descending artery, treated with a drug-eluting stent",
        "a subtotal occlusion of the right coronary artery, treated with two drug-eluting stents",
        "diffuse two-vessel disease without an interventional target",
        "a 70% stenosis of the circumflex artery, treated with a drug-eluting stent",
        "no significant coronary stenosis")),
    Procedure("transthoracic echocardiography", "imaging", (
        "a left ventricular ejection fraction of 35% with anterior hypokinesia",
        "a left ventricular ejection fraction of 55% without wall motion abnormalities",
        "a dilated right ventricle with a systolic pulmonary pressure of 55 mmHg",
        "a moderate mitral regurgitation with a dilated left atrium",
        "a left ventricular ejection fraction of 25% with global hypokinesia")),
    Procedure("lymph node biopsy", "biopsy", (
        "diffuse infiltration by large CD20-positive B cells", "reactive lymphadenitis without malignancy",
        "infiltration by small CD5-positive lymphocytes", "granulomatous inflammation without necrosis",
        "metastasis of a squamous cell carcinoma")),
    Procedure("PET-CT", "imaging", (
        "hypermetabolic lymph nodes on both sides of the diaphragm",
        "a single hypermetabolic cervical lymph node", "hypermetabolic lymph nodes and splenic involvement",
        "no hypermetabolic lesions", "hypermetabolic mediastinal lymph nodes only")),
    Procedure("bone marrow biopsy", "biopsy", (
        "no infiltration by lymphoma cells", "a 20% infiltration by lymphoma cells",
        "a hypercellular marrow with reactive changes", "a mild reticulin fibrosis without infiltration",
        "a 60% infiltration by lymphoma cells")),
    Procedure("port catheter implantation", "intervention", (
        "an uncomplicated placement via the right subclavian vein",
        "an uncomplicated placement via the left cephalic vein",
        "a placement via the right internal jugular vein after a failed first puncture",
        "a placement with a small hematoma at the pocket site",
        "an uncomplicated placement via the left subclavian vein")),
    Procedure("abdominal ultrasound", "imaging", (
        "gallstones with a dilated common bile duct of 9 mm", "a swollen pancreas with peripancreatic fluid",
        "an enlarged liver with fatty infiltration", "no pathological findings",
        "a small amount of free fluid in the pelvis")),
    Procedure("CT of the abdomen", "imaging", (
        "an edematous pancreas without necrosis",
        "a wall thickening of the sigmoid colon with enlarged local lymph nodes",
        "a perinephric fat stranding of the right kidney", "two liver lesions suspicious for metastases",
        "no intra-abdominal abscess")),
    Procedure("ERCP", "endoscopy", (
        "extraction of two stones from the common bile duct after sphincterotomy",
        "a biliary stent placed across a distal bile duct stricture", "a normal bile duct without stones",
        "extraction of sludge from the common bile duct", "a papillary adenoma, biopsied")),
    Procedure("laparoscopic cholecystectomy", "intervention", (
        "an uncomplicated removal of a chronically inflamed gallbladder",
        "a removal of a gangrenous gallbladder with a drain left in place",
        "a conversion to open surgery because of adhesions",
        "an uncomplicated removal of a gallbladder with multiple stones",
        "a removal of the gallbladder with a small bile leak, clipped")),
    Procedure("CT of the head", "imaging", (
        "no intracranial hemorrhage and early ischemic signs in the left insula",
        "no intracranial hemorrhage and no early ischemic signs",
        "an old lacunar infarct in the right basal ganglia", "a hyperdense left middle cerebral artery sign",
        "generalized brain atrophy without acute changes")),
    Procedure("MRI of the brain", "imaging", (
        "an acute infarct in the left middle cerebral artery territory",
        "multiple small acute embolic infarcts in both hemispheres",
        "an acute lacunar infarct in the left internal capsule", "no diffusion restriction",
        "an acute infarct in the left cerebellum")),
    Procedure("carotid duplex ultrasound", "imaging", (
        "a 70% stenosis of the left internal carotid artery", "mild plaques without relevant stenosis",
        "an occlusion of the left internal carotid artery",
        "a 50% stenosis of the right internal carotid artery", "normal flow in all extracranial vessels")),
    Procedure("right heart catheterization", "intervention", (
        "a mean pulmonary arterial pressure of 32 mmHg with a wedge pressure of 22 mmHg",
        "normal pulmonary pressures",
        "a mean pulmonary arterial pressure of 45 mmHg with a normal wedge pressure",
        "a reduced cardiac index of 1.9 l/min/m2", "an elevated right atrial pressure of 18 mmHg")),
    Procedure("CT pulmonary angiography", "imaging", (
        "central pulmonary emboli on both sides with right heart strain",
        "segmental emboli in the right lower lobe", "a saddle embolus at the pulmonary bifurcation",
        "subsegmental emboli in the left lower lobe", "no pulmonary embolism")),
    Procedure("compression ultrasound of the leg veins", "imaging", (
        "a thrombosis of the left popliteal vein", "a thrombosis of the right femoral vein",
        "no deep vein thrombosis", "a thrombosis of the left calf veins",
        "a superficial thrombophlebitis of the right leg")),
    Procedure("colonoscopy", "endoscopy", (
        "a stenosing tumor in the sigmoid colon at 30 cm, biopsied",
        "two small polyps in the descending colon, removed",
        "diverticulosis of the sigmoid colon without inflammation",
        "an ulcerated tumor in the rectum at 12 cm, biopsied",
        "no pathological findings up to the terminal ileum")),
    Procedure("laparoscopic sigmoid resection", "intervention", (
        "an uncomplicated resection with primary anastomosis", "a resection with a protective loop ileostomy",
        "a conversion to open surgery because of tumor adhesion to the bladder",
        "a resection with removal of 18 lymph nodes and clear margins",
        "a resection with a drain left in the pelvis")),
    Procedure("renal ultrasound", "imaging", (
        "a mildly dilated right renal pelvis", "a swollen right kidney without obstruction",
        "normal kidneys on both sides", "a 6 mm stone in the right ureter with congestion",
        "a simple cyst of the left kidney")),
    Procedure("ureteral stent placement", "intervention", (
        "an uncomplicated placement of a stent into the right ureter",
        "a placement of a stent into the left ureter", "a failed stent placement followed by a nephrostomy",
        "a placement of stents into both ureters",
        "a placement of a right ureteral stent with drainage of purulent urine")),
    Procedure("spirometry", "function test", (
        "a severe obstruction with an FEV1 of 38% of predicted",
        "a moderate obstruction with an FEV1 of 58% of predicted", "a normal lung function",
        "a mild restriction without obstruction",
        "a very severe obstruction with an FEV1 of 27% of predicted")),
)}

LABS: dict[str, Lab] = {lab.name: lab for lab in (
    Lab("hemoglobin", "g/dL", 12.0, 16.0, 1),
    Lab("leukocytes", "/nL", 4.0, 10.0, 1),
    Lab("platelets", "/nL", 150, 400, 0),
    Lab("sodium", "mmol/L", 135, 145, 0),
    Lab("potassium", "mmol/L", 3.5, 5.0, 1),
    Lab("creatinine", "mg/dL", 0.6, 1.2, 2),
    Lab("C-reactive protein", "mg/L", 0.0, 5.0, 1),
    Lab("ALT", "U/L", 10, 35, 0),
    Lab("glucose", "mg/dL", 70, 110, 0),
    Lab("procalcitonin", "ng/mL", 0.0, 0.5, 2),
    Lab("troponin T", "ng/L", 0, 14, 0),
    Lab("NT-proBNP", "pg/mL", 0, 125, 0),
    Lab("LDH", "U/L", 120, 250, 0),
    Lab("lipase", "U/L", 13, 60, 0),
    Lab("D-dimer", "mg/L", 0.0, 0.5, 2),
    Lab("CEA", "ng/mL", 0.0, 5.0, 1),
    Lab("bilirubin", "mg/dL", 0.2, 1.1, 1),
    Lab("uric acid", "mg/dL", 3.5, 7.0, 1),
)}
BASIC_LABS = ("hemoglobin", "leukocytes", "platelets", "sodium", "potassium", "creatinine",
              "C-reactive protein", "ALT", "glucose")

COMORBIDITIES: dict[str, Comorbidity] = {item.name: item for item in (
    Comorbidity("arterial hypertension", "amlodipine", "5 mg", "once daily"),
    Comorbidity("type 2 diabetes mellitus", "metformin", "1000 mg", "twice daily"),
    Comorbidity("hypothyroidism", "levothyroxine", "75 micrograms", "once daily"),
    Comorbidity("hypercholesterolemia", "simvastatin", "20 mg", "once daily"),
    Comorbidity("gout", "febuxostat", "80 mg", "once daily"),
    Comorbidity("depression", "sertraline", "50 mg", "once daily"),
    Comorbidity("osteoporosis", "alendronic acid", "70 mg", "once weekly"),
    Comorbidity("benign prostatic hyperplasia", "tamsulosin", "0.4 mg", "once daily"),
    Comorbidity("glaucoma", "latanoprost eye drops", "one drop", "once daily in the evening"),
    Comorbidity("gastroesophageal reflux disease", "esomeprazole", "20 mg", "once daily"),
    Comorbidity("migraine", "sumatriptan", "50 mg", "as needed"),
    Comorbidity("restless legs syndrome", "pramipexole", "0.18 mg", "once daily at night"),
)}

MALE_ONLY = frozenset({"benign prostatic hyperplasia"})

CONDITIONS: tuple[Condition, ...] = (
    Condition("community-acquired pneumonia of the right lower lobe", "Pulmonology",
              ("fever", "productive cough", "shortness of breath", "pleuritic chest pain", "chills",
               "fatigue", "loss of appetite"),
              ("ceftriaxone", "azithromycin", "amoxicillin/clavulanic acid", "paracetamol", "enoxaparin",
               "salbutamol", "acetylcysteine"),
              ("chest X-ray", "CT of the chest", "bronchoscopy", "12-lead ECG",
               "transthoracic echocardiography"),
              {"C-reactive protein": (80, 240), "leukocytes": (12.5, 21.0), "procalcitonin": (0.8, 6.0)},
              "antibiotic therapy was started and switched to an oral antibiotic after clinical "
              "improvement"),
    Condition("non-ST-elevation myocardial infarction", "Cardiology",
              ("retrosternal chest pressure", "pain radiating to the left arm", "sweating", "nausea",
               "shortness of breath", "dizziness"),
              ("aspirin", "ticagrelor", "unfractionated heparin", "atorvastatin", "metoprolol succinate",
               "ramipril", "nitroglycerin", "pantoprazole"),
              ("12-lead ECG", "coronary angiography", "transthoracic echocardiography", "chest X-ray",
               "abdominal ultrasound"),
              {"troponin T": (90, 2400), "LDH": (260, 480), "glucose": (115, 190)},
              "the culprit lesion was treated by coronary intervention and a dual antiplatelet therapy was "
              "begun"),
    Condition("diffuse large B-cell lymphoma, stage III", "Hematology and Oncology",
              ("night sweats", "weight loss", "painless swelling of the neck", "fatigue", "fever", "itching"),
              ("rituximab", "cyclophosphamide", "doxorubicin", "vincristine", "prednisolone", "allopurinol",
               "ondansetron", "cotrimoxazole"),
              ("lymph node biopsy", "PET-CT", "bone marrow biopsy", "port catheter implantation",
               "transthoracic echocardiography", "CT of the chest"),
              {"LDH": (320, 900), "hemoglobin": (8.6, 11.4), "uric acid": (7.4, 10.5)},
              "the first cycle of R-CHOP immunochemotherapy was given and tolerated well"),
    Condition("acute biliary pancreatitis", "Gastroenterology",
              ("upper abdominal pain radiating to the back", "nausea", "vomiting", "abdominal bloating",
               "fever", "yellowing of the skin"),
              ("Ringer's lactate", "morphine", "metamizole", "pantoprazole", "piperacillin/tazobactam",
               "enoxaparin", "ondansetron"),
              ("abdominal ultrasound", "CT of the abdomen", "ERCP", "laparoscopic cholecystectomy",
               "chest X-ray"),
              {"lipase": (600, 4200), "C-reactive protein": (40, 190), "bilirubin": (1.8, 5.6),
               "ALT": (90, 420)},
              "fluid resuscitation and pain control were given, the bile duct was cleared endoscopically "
              "and the gallbladder was removed"),
    Condition("acute ischemic stroke in the left middle cerebral artery territory", "Neurology",
              ("right-sided weakness", "slurred speech", "drooping of the right corner of the mouth",
               "word-finding difficulties", "headache", "dizziness"),
              ("alteplase", "aspirin", "clopidogrel", "atorvastatin", "enoxaparin", "pantoprazole",
               "ramipril"),
              ("CT of the head", "MRI of the brain", "carotid duplex ultrasound",
               "transthoracic echocardiography", "12-lead ECG"),
              {"glucose": (120, 210), "LDH": (255, 330)},
              "systemic thrombolysis was given within the time window and a secondary prevention was "
              "started"),
    Condition("acute decompensated heart failure", "Cardiology",
              ("swelling of both legs", "shortness of breath", "breathlessness when lying flat",
               "weight gain", "fatigue", "nocturnal cough"),
              ("furosemide", "spironolactone", "bisoprolol", "sacubitril/valsartan", "empagliflozin",
               "potassium chloride", "enoxaparin"),
              ("transthoracic echocardiography", "chest X-ray", "12-lead ECG", "right heart catheterization",
               "abdominal ultrasound"),
              {"NT-proBNP": (2400, 14000), "sodium": (126, 133), "creatinine": (1.3, 2.2)},
              "intravenous diuresis removed the fluid overload and the heart failure medication was "
              "optimized"),
    Condition("pulmonary embolism", "Angiology",
              ("shortness of breath", "pleuritic chest pain", "palpitations", "calf pain",
               "coughing up blood", "dizziness"),
              ("unfractionated heparin", "apixaban", "rivaroxaban", "paracetamol", "pantoprazole",
               "enoxaparin"),
              ("CT pulmonary angiography", "compression ultrasound of the leg veins",
               "transthoracic echocardiography", "12-lead ECG", "chest X-ray"),
              {"D-dimer": (2.1, 9.5), "troponin T": (18, 70), "NT-proBNP": (300, 2100)},
              "anticoagulation was started with heparin and switched to an oral anticoagulant"),
    Condition("adenocarcinoma of the sigmoid colon", "Visceral Surgery",
              ("blood in the stool", "change in bowel habits", "lower abdominal pain", "weight loss",
               "fatigue", "constipation"),
              ("cefuroxime", "metronidazole", "metamizole", "enoxaparin", "pantoprazole", "macrogol",
               "ondansetron"),
              ("colonoscopy", "CT of the abdomen", "CT of the chest", "laparoscopic sigmoid resection",
               "port catheter implantation"),
              {"CEA": (7.5, 48.0), "hemoglobin": (8.2, 11.2)},
              "the tumor was resected laparoscopically and the case was presented at the tumor board"),
    Condition("acute pyelonephritis with urosepsis", "Nephrology",
              ("flank pain", "fever", "chills", "painful urination", "frequent urination", "nausea"),
              ("piperacillin/tazobactam", "ciprofloxacin", "Ringer's lactate", "metamizole", "enoxaparin",
               "paracetamol"),
              ("renal ultrasound", "CT of the abdomen", "ureteral stent placement", "chest X-ray",
               "12-lead ECG"),
              {"C-reactive protein": (120, 320), "leukocytes": (14.0, 26.0), "creatinine": (1.4, 2.9),
               "procalcitonin": (2.0, 18.0)},
              "the obstructed kidney was drained and the antibiotic therapy was adjusted to the urine "
              "culture"),
    Condition("acute exacerbation of chronic obstructive pulmonary disease", "Pulmonology",
              ("shortness of breath", "wheezing", "increased sputum", "productive cough", "chest tightness",
               "fatigue"),
              ("prednisolone", "ipratropium", "salbutamol", "doxycycline", "tiotropium", "enoxaparin",
               "acetylcysteine"),
              ("chest X-ray", "spirometry", "12-lead ECG", "CT of the chest",
               "transthoracic echocardiography"),
              {"leukocytes": (10.5, 16.0), "C-reactive protein": (12, 70)},
              "systemic steroids, inhaled bronchodilators and an antibiotic relieved the exacerbation"),
)

// The Cosmos DB account of the state store, the orders database and the supervisor's
// deadline index (S2, C3, U1-U3). Entra ID only (disableLocalAuth), TLS 1.2, serverless by
// default. The database and containers come from cosmos-containers.json, the definitions
// python -m tools.cosmos_containers prints (partition keys, indexing policies, TTL), loaded as
// they are: the app, holding a data-plane role only, creates none of them in Azure.
// The identity gets the built-in Data Contributor on the database, not the account.
param name string
param location string
param tags object
param serverless bool = true
param vnetEnabled bool = false
param identityPrincipalId string
param deployerPrincipalId string = ''

// Cosmos DB Built-in Data Contributor (read and write items) and Data Reader.
var cosmosDataContributor = '00000000-0000-0000-0000-000000000002'
var cosmosDataReader = '00000000-0000-0000-0000-000000000001'

var layout = loadJsonContent('../cosmos-containers.json')

resource account 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' = {
  name: name
  location: location
  tags: tags
  kind: 'GlobalDocumentDB'
  // checkov:skip=CKV_AZURE_101:public network access is off with vnetEnabled; without a VNet the account is reached over the internet, with Entra ID only (disableLocalAuth)
  // checkov:skip=CKV_AZURE_99:same: IP or VNet restriction comes with vnetEnabled (private endpoint), identity guards the default deployment
  properties: {
    databaseAccountOfferType: 'Standard'
    locations: [
      {
        locationName: location
        failoverPriority: 0
        isZoneRedundant: false
      }
    ]
    consistencyPolicy: {
      defaultConsistencyLevel: 'Session'
    }
    capabilities: serverless ? [
      {
        name: 'EnableServerless'
      }
    ] : []
    disableLocalAuth: true
    disableKeyBasedMetadataWriteAccess: true
    minimalTlsVersion: 'Tls12'
    publicNetworkAccess: vnetEnabled ? 'Disabled' : 'Enabled'
  }
}

resource database 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2024-11-15' = {
  parent: account
  name: layout.database
  properties: {
    resource: {
      id: layout.database
    }
    options: serverless ? {} : {
      autoscaleSettings: {
        maxThroughput: 1000
      }
    }
  }
}

resource containers 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = [
  for container in layout.containers: {
    parent: database
    name: container.id
    properties: {
      resource: container
    }
  }
]

resource appDataAccess 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-11-15' = {
  parent: account
  name: guid(database.id, identityPrincipalId, cosmosDataContributor)
  properties: {
    principalId: identityPrincipalId
    roleDefinitionId: '${account.id}/sqlRoleDefinitions/${cosmosDataContributor}'
    scope: '${account.id}/dbs/${layout.database}'
  }
}

// The deployer may read the records (the state store, the orders), not change them.
resource deployerDataAccess 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-11-15' = if (!empty(deployerPrincipalId)) {
  parent: account
  name: guid(database.id, deployerPrincipalId, cosmosDataReader)
  properties: {
    principalId: deployerPrincipalId
    roleDefinitionId: '${account.id}/sqlRoleDefinitions/${cosmosDataReader}'
    scope: '${account.id}/dbs/${layout.database}'
  }
}

output id string = account.id
output name string = account.name
output endpoint string = account.properties.documentEndpoint
output database string = layout.database
